package filter

import (
	"math/rand/v2"
	"strconv"
	"time"
	"unsafe"

	"github.com/borrowcycle/borrowcycle/engine"
)

// Header names of docs/contract.md.
const (
	hdrRateLimited = "x-envoy-ratelimited"
	hdrReason      = "x-borrowcycle-reason"
	hdrRetryAfter  = "retry-after"
	hdrLimit       = "x-ratelimit-limit"
	hdrRemaining   = "x-ratelimit-remaining"
	hdrReset       = "x-ratelimit-reset"
	hdrPolicy      = "ratelimit-policy"
	hdrRateLimit   = "ratelimit"
	hdrDebugPlan   = "x-borrowcycle-plan"
	hdrDebugWaited = "x-borrowcycle-waited" // held requests (wait.go): "<waited ms>;promised=<ms>"
)

// rejectionBodies are the one-line bodies of local replies, one per reason.
// The anonymous body names the configured source, so it is built per config.
var rejectionBodies = map[engine.Reason]string{
	engine.ReasonOverLimit:    "borrowcycle: over_limit: this client is over its share for now; retry after the retry-after delay",
	engine.ReasonPending:      "borrowcycle: pending: new client is being registered; retry after the retry-after delay",
	engine.ReasonTableFull:    "borrowcycle: table_full: too many distinct clients",
	engine.ReasonStoreFailure: "borrowcycle: store_failure: limiter state unavailable",
	engine.ReasonContended:    "borrowcycle: contended: limiter state busy; retry after the retry-after delay",
	engine.ReasonAmbiguousID:  "borrowcycle: ambiguous_id: the client id header appears more than once",
	engine.ReasonTooManyIDs:   "borrowcycle: too_many_ids: this peer used its client ids for the current window",
}

// Reply is a local reply: what the host sends instead of forwarding the
// request.
type Reply struct {
	Status  uint32
	Headers [][2]string
	Body    []byte
}

// responder plans local replies and rate-limit headers for one plugin
// configuration. A plan allocates nothing: its header list and the numbers
// in it live in buffers reused by the next plan. That is safe because a VM
// runs one callback at a time and a proxy-wasm host copies header values
// out of the guest during the call that receives them; so a plan is valid
// until the next one.
type responder struct {
	status    uint32
	style     HeaderStyle
	onAllowed bool // rate-limit headers on admitted responses
	debug     bool
	bodies    [][]byte     // by engine.Reason
	policies  []ietfPolicy // by window, longest first (EngineWindows)
	headers   [][2]string
	buf       []byte // the values formatted for the current plan
	jitter    time.Duration
	rand      func(n int64) int64 // uniform in [0, n): rand.Int64N, or a test's
}

// ietfPolicy is one window's policy in the IETF headers: its name is the
// limit's, with the window's label after a "/" when it has several.
type ietfPolicy struct {
	head string // `"<name>";q=`
	tail string // `;w=<cycle seconds>`
	rate string // `"<name>";r=`
}

func newResponder(cfg *Config) responder {
	r := responder{
		status:    cfg.StatusCode,
		style:     cfg.RateLimitHeaders,
		onAllowed: cfg.HeadersOnAllowed && cfg.RateLimitHeaders != StyleNone,
		debug:     cfg.DebugHeaders,
		bodies:    make([][]byte, len(engine.Reasons())),
		headers:   make([][2]string, 0, 10),
		jitter:    cfg.RetryAfterJitter,
		rand:      rand.Int64N,
	}
	room := 3*20 + 64
	for _, w := range cfg.EngineWindows() {
		name := cfg.Name
		if w.Label != "" {
			name += "/" + w.Label
		}
		p := ietfPolicy{
			head: strconv.Quote(name) + ";q=",
			tail: ";w=" + strconv.FormatInt(ceilSeconds(w.Engine.Cycle), 10),
			rate: strconv.Quote(name) + ";r=",
		}
		r.policies = append(r.policies, p)
		room += len(p.head) + len(p.tail) + len(p.rate) + 2 + 20
	}
	// Room for every value of one plan, so that the buffer never grows.
	r.buf = make([]byte, 0, room)
	// Each body ends in a newline, so it reads as one line in a terminal.
	for reason, body := range rejectionBodies {
		r.bodies[reason] = []byte(body + "\n")
	}
	r.bodies[engine.ReasonAnonymous] = []byte(cfg.ClientID.anonymousBody() + "\n")
	return r
}

// reply plans the local reply for a rejected decision. Its retry-after,
// and its rate-limit headers' reset, name when a retry can succeed at the
// earliest (the engine's RetryAfter), moved later by up to the configured
// jitter, so that clients refused together do not retry together; a
// pacer's turn is not moved, since turns spread those clients already.
func (r *responder) reply(o Outcome) Reply {
	d := o.Decision
	r.buf = r.buf[:0]
	h := append(r.headers[:0], [2]string{hdrReason, d.Reason.String()})
	if !unidentified(d.Reason) {
		wait := d.RetryAfter
		if r.jitter > 0 && !d.Turn {
			wait += time.Duration(r.rand(int64(r.jitter) + 1))
		}
		secs := retryAfterSeconds(wait)
		h = append(h,
			[2]string{hdrRateLimited, "true"},
			[2]string{hdrRetryAfter, r.int(secs)})
		h = r.appendRateLimit(h, o, secs)
	}
	h = r.appendDebug(h, o)
	r.headers = h
	return Reply{Status: r.status, Headers: h, Body: r.bodies[d.Reason]}
}

// responseHeaders plans the headers added to an upstream response: the
// rate-limit headers (when configured for admitted responses and the
// decision carries a share to report) and the debug header.
func (r *responder) responseHeaders(o Outcome) [][2]string {
	d := o.Decision
	r.buf = r.buf[:0]
	h := r.headers[:0]
	if r.onAllowed && reportsShare(d) {
		h = r.appendRateLimit(h, o, ceilSeconds(d.Reset))
	}
	h = r.appendDebug(h, o)
	r.headers = h
	return h
}

// appendDebug appends the debug headers, when debug_headers is on: the
// plan that decided, and for a held request how long it waited and how
// long its last hold was meant to last from its arrival, in milliseconds.
func (r *responder) appendDebug(h [][2]string, o Outcome) [][2]string {
	if !r.debug {
		return h
	}
	h = append(h, [2]string{hdrDebugPlan, r.uint(o.Decision.Plan)})
	if o.Waited > 0 {
		start := len(r.buf)
		r.buf = strconv.AppendInt(r.buf, o.Waited.Milliseconds(), 10)
		r.buf = strconv.AppendInt(append(r.buf, ";promised="...), o.Promised.Milliseconds(), 10)
		h = append(h, [2]string{hdrDebugWaited, r.since(start)})
	}
	return h
}

// reportsShare is false for admitted decisions that know no share: a store
// failure admitted by failure_mode_deny=false, or an anonymous request in
// passthrough mode. Headers there would claim a limit of 0.
func reportsShare(d engine.Decision) bool {
	return d.Reason != engine.ReasonStoreFailure && !unidentified(d.Reason)
}

// unidentified reports whether a decision was made without a client id
// (anonymous, ambiguous_id): it has no share to report, and no retry-after,
// since retrying the same request cannot help.
func unidentified(r engine.Reason) bool {
	return r == engine.ReasonAnonymous || r == engine.ReasonAmbiguousID
}

// appendRateLimit appends the rate-limit headers of the configured style,
// for the window whose decision o reports (the binding one); their reset
// is in whole seconds: the window's end on an admitted request, the
// retry-after itself on a refused one (so the two never differ, even where
// a wait under a second rounds up to one). The IETF policy header lists
// the policy of every window that decided the request.
func (r *responder) appendRateLimit(h [][2]string, o Outcome, reset int64) [][2]string {
	d := o.Decision
	switch r.style {
	case StyleXRateLimit:
		return append(h,
			[2]string{hdrLimit, r.int(d.Limit)},
			[2]string{hdrRemaining, r.int(d.Remaining)},
			[2]string{hdrReset, r.int(reset)})
	case StyleIETF:
		decided := len(r.policies)
		if !d.Allowed || d.WouldReject {
			decided = o.Window + 1 // the windows after it did not decide
		}
		start := len(r.buf)
		for w := range decided {
			q := o.Shares[w]
			if w == o.Window {
				q = d.Limit
			}
			if w > 0 {
				r.buf = append(r.buf, ", "...)
			}
			r.buf = append(strconv.AppendInt(append(r.buf, r.policies[w].head...), q, 10), r.policies[w].tail...)
		}
		policy := r.since(start)
		start = len(r.buf)
		r.buf = strconv.AppendInt(append(strconv.AppendInt(append(r.buf, r.policies[o.Window].rate...), d.Remaining, 10), ";t="...), reset, 10)
		return append(h, [2]string{hdrPolicy, policy}, [2]string{hdrRateLimit, r.since(start)})
	}
	return h
}

// int and uint format n into the plan's buffer.
func (r *responder) int(n int64) string {
	start := len(r.buf)
	r.buf = strconv.AppendInt(r.buf, n, 10)
	return r.since(start)
}

func (r *responder) uint(n uint64) string {
	start := len(r.buf)
	r.buf = strconv.AppendUint(r.buf, n, 10)
	return r.since(start)
}

// since is what the plan wrote to its buffer from start, as a string that
// shares the buffer's memory. Should the buffer ever grow, the strings
// already made keep the old array alive, so they stay intact.
func (r *responder) since(start int) string {
	b := r.buf[start:]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// ceilSeconds is d in whole seconds, rounded up, never negative.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is at least 1: "retry-after: 0" invites an immediate
// retry that would be rejected again.
func retryAfterSeconds(d time.Duration) int64 { return max(1, ceilSeconds(d)) }
