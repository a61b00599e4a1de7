// Package filter is Borrowcycle's HTTP filter without its host: the plugin
// configuration (config.go), the client id (clientid.go), and the request
// path from a client header to a decision and from a decision to what the
// host must send (this file, responses.go). Nothing here calls the host, so
// every rule of docs/contract.md is testable as a plain function; package
// host is the proxy-wasm adapter that reads headers, makes the calls and
// keeps the metrics. The limiting itself (cycles, shares, leases) lives in
// package engine.
package filter

import (
	"fmt"
	"strings"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// Filter is one plugin configuration in one VM: for each limit, its
// limiter (this worker's view of the limit) and the responses it plans.
// Like the VM that holds it, it runs one callback at a time.
type Filter struct {
	set    Settings
	clock  engine.Clock
	limits []limit
	// needPath and needMethod say whether some limit matches on them, so
	// that a filter without such limits never reads them.
	needPath, needMethod bool
	log                  accessLog
}

// limit is one configured limit at run time: a limiter per window, longest
// first (one for a limit of one window); an unlimited rule has none.
type limit struct {
	cfg      *Config
	limiters []*engine.Limiter
	resp     responder
}

// Outcome is the filter's verdict on one request.
type Outcome struct {
	// Limit is the index of the limit that decided, -1 when none did (no
	// limit matched, or an unlimited rule did): the request passes
	// unlimited and Decision is the zero value.
	Limit    int
	Decision engine.Decision
	// Window is the index, in the limit's EngineWindows, of the window
	// whose decision Decision is: the one that refused the request, or of
	// those that admitted it the one with the fewest units left. Shares
	// are the client's share in each window that decided the request (0:
	// not decided, after an earlier window refused it).
	Window int
	Shares [MaxWindows]int64
	// Client is the id the limit counted; empty for an anonymous request.
	Client string
	// Waited is how long the request was held before this decision, and
	// Promised how long, from its arrival, its last hold was meant to
	// last (wait.go); both 0 for a request decided when it arrived.
	Waited, Promised time.Duration
}

// Matched reports whether a limit decided the request.
func (o *Outcome) Matched() bool { return o.Limit >= 0 }

// New builds the filter of valid settings over store, the state all
// workers share. obs returns the observer of the i-th limit's w-th window
// (in EngineWindows); it may be nil.
func New(set Settings, store engine.Store, clock engine.Clock, obs func(i, w int) engine.Observer) (*Filter, error) {
	f := &Filter{set: set, clock: clock, limits: make([]limit, len(set.Limits))}
	for i := range set.Limits {
		cfg := &f.set.Limits[i]
		f.needPath = f.needPath || cfg.Match.PathPrefix != "" || cfg.Match.PathExact != ""
		f.needMethod = f.needMethod || len(cfg.Match.Methods) > 0
		if cfg.Unlimited {
			f.limits[i] = limit{cfg: cfg}
			continue
		}
		l := limit{cfg: cfg, resp: newResponder(cfg)}
		for w, win := range cfg.EngineWindows() {
			opts := []engine.Option{engine.WithClock(clock)}
			if obs != nil {
				if o := obs(i, w); o != nil {
					opts = append(opts, engine.WithObserver(o))
				}
			}
			lim, err := engine.New(win.Engine, store, opts...)
			if err != nil {
				return nil, fmt.Errorf("limit %q: %w", cfg.Name, err)
			}
			l.limiters = append(l.limiters, lim)
		}
		f.limits[i] = l
	}
	f.log = newAccessLog(f.set.Limits)
	return f, nil
}

// Settings is the configuration the filter runs.
func (f *Filter) Settings() *Settings { return &f.set }

// Match is the index of the first limit whose match holds for req, -1 if
// none does. It reads ":path" and ":method" once, and only when a limit
// needs them.
func (f *Filter) Match(req Request) int {
	var line requestLine
	if f.needPath {
		p, _ := req.Header(":path")
		line.path = stripQuery(p)
	}
	if f.needMethod {
		line.method, _ = req.Header(":method")
	}
	for i := range f.limits {
		if f.limits[i].cfg.Match.holds(&line, req) {
			return i
		}
	}
	return -1
}

// Decide matches one request and, when a limit matches, admits or rejects
// it there, charging the limit's cost. An anonymous request (no usable id
// from the limit's source) has the empty id, to which the engine applies
// the mode (passthrough admits) and counts nothing. An ambiguous one (the
// id header sent more than once) is decided as anonymous and reported as
// ambiguous_id.
func (f *Filter) Decide(req Request) Outcome {
	i := f.Match(req)
	if i < 0 || f.limits[i].limiters == nil {
		return Outcome{Limit: -1}
	}
	l := &f.limits[i]
	id, verdict := RequestClientID(&l.cfg.ClientID, req, l.cfg.MaxClientIDBytes)
	peer, bound := "", l.cfg.Engine.MaxIDsPerPeer > 0 && id != ""
	if bound {
		peer = RequestPeer(&l.cfg.Peer, req)
	}
	o := l.decide(f.clock.Now(), peer, bound, id)
	o.Limit = i
	if verdict == IDAmbiguous {
		o.Decision.Reason = engine.ReasonAmbiguousID
	}
	return o
}

// decide admits or refuses one request of client id (counted per peer when
// bound) in every window of the limit, longest first: the first window
// that refuses it decides, and the windows before it that admitted it
// give their units back (Limiter.Refund), so that a refused request takes
// nothing from any window. Longest first, so that a request both a day
// and a second would refuse is told the day's end.
func (l *limit) decide(now time.Time, peer string, bound bool, id string) Outcome {
	o := Outcome{Client: id}
	var granted [MaxWindows]bool // the window's units were taken (not a fail-open admission)
	for w, lim := range l.limiters {
		var d engine.Decision
		if bound {
			d = lim.AdmitFromAt(now, peer, id, l.cfg.Cost)
		} else {
			d = lim.AdmitNAt(now, id, l.cfg.Cost)
		}
		o.Shares[w] = d.Limit
		if !d.Allowed || d.WouldReject {
			for k := range w {
				if granted[k] {
					l.limiters[k].Refund(id, l.cfg.Cost)
				}
			}
			o.Decision, o.Window = d, w
			return o
		}
		granted[w] = d.Reason == engine.ReasonOK
		if w == 0 || d.Remaining < o.Decision.Remaining {
			o.Decision, o.Window = d, w
		}
	}
	return o
}

// RequestClientID reads the id of spec's source from req: the id, or the
// empty string with why there is none.
func RequestClientID(spec *ClientIDSpec, req Request, maxBytes int) (string, Verdict) {
	if spec.From == FromHeader {
		first, copies := req.HeaderCopies(spec.Header)
		return HeaderID(first, copies, maxBytes)
	}
	value, found := req.Property(spec.Property)
	var id string
	var ok bool
	switch spec.From {
	case FromSourceAddress:
		id, ok = AddressID(value, found, maxBytes)
	case FromPeerPrincipal:
		id, ok = PrincipalID(value, found, maxBytes)
	default:
		id, ok = MetadataID(value, found, maxBytes)
	}
	if !ok {
		return "", IDMissing
	}
	return id, IDFound
}

// FailSafe is the decision when Decide could not finish (a panic below it):
// admit, unless failure_mode_deny asks to reject as for unavailable state.
// The limit that would have decided is unknown, so the primary one (the
// only one in the single-limit form) speaks for the filter.
func (f *Filter) FailSafe() Outcome {
	i := f.set.Primary()
	c := &f.set.Limits[i]
	if !c.Engine.FailureModeDeny || c.Passthrough {
		return Outcome{Limit: i, Decision: engine.Decision{Allowed: true, Reason: engine.ReasonStoreFailure}}
	}
	return Outcome{Limit: i, Decision: engine.Decision{Reason: engine.ReasonStoreFailure, WouldReject: true, RetryAfter: time.Second}}
}

// Reply is the local reply for a rejected outcome. It is valid until the
// next call of Reply or ResponseHeaders.
func (f *Filter) Reply(o Outcome) Reply { return f.limits[o.Limit].resp.reply(o) }

// ResponseHeaders are the headers to add to the upstream response of an
// admitted request; often none. They are valid until the next call of Reply
// or ResponseHeaders.
func (f *Filter) ResponseHeaders(o Outcome) [][2]string {
	if !o.Matched() {
		return nil
	}
	return f.limits[o.Limit].resp.responseHeaders(o)
}

// AccessLog is the access-log record of a decided outcome (accesslog.go).
// It is valid until the next call.
func (f *Filter) AccessLog(o Outcome) []byte { return f.log.record(o) }

// Tick rolls every limit's cycle over when due and hands back unused
// leases; it reports the number of clients each limit's shared table holds
// through active.
func (f *Filter) Tick(active func(i, w, clients int)) {
	now := f.clock.Now()
	for i := range f.limits {
		for w, l := range f.limits[i].limiters {
			l.TickAt(now)
			if active != nil {
				active(i, w, l.ActiveClients())
			}
		}
	}
}

// Plan reads the next slice of the plans this worker reads over large
// tables (engine.Limiter.PlanAt), and reports whether it still reads one:
// the host should then tick every engine.PlanTick.
func (f *Filter) Plan() bool {
	now, planning := f.clock.Now(), false
	for i := range f.limits {
		for _, l := range f.limits[i].limiters {
			planning = l.PlanAt(now) || planning
		}
	}
	return planning
}

// Planning reports whether this worker reads a plan a slice at a time.
func (f *Filter) Planning() bool {
	for i := range f.limits {
		for _, l := range f.limits[i].limiters {
			if l.Planning() {
				return true
			}
		}
	}
	return false
}

// TickPeriod is how often the host should tick the filter: often enough
// for the limit that needs it most often (Config.TickPeriod).
func (f *Filter) TickPeriod() time.Duration { return f.shortest((*Config).TickPeriod) }

// HousekeepingPeriod is how often the host should call Tick: often enough
// for the limit with the shortest cycle (Config.HousekeepingPeriod).
func (f *Filter) HousekeepingPeriod() time.Duration { return f.shortest((*Config).HousekeepingPeriod) }

// shortest is the least of period over the limits that limit.
func (f *Filter) shortest(period func(*Config) time.Duration) time.Duration {
	p := period(&f.set.Limits[f.set.Primary()])
	for i := range f.set.Limits {
		if !f.set.Limits[i].Unlimited {
			p = min(p, period(&f.set.Limits[i]))
		}
	}
	return p
}

// Summary is the info line that says what this filter enforces: every
// setting of every limit (limitSummary).
func (f *Filter) Summary() string {
	var b strings.Builder
	b.WriteString("borrowcycle:")
	for i := range f.set.Limits {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" ")
		b.WriteString(limitSummary(&f.set.Limits[i]))
	}
	return b.String()
}
