package filter

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/borrowcycle/borrowcycle/engine"
)

// Fleet mode (docs/contract.md, "Fleet mode"): the fleet block of a limit,
// the callouts to Gubernator's HTTP gateway, and the parsing of its answers.
// Everything here is pure; package host sends the callouts.

// Defaults and bounds of the fleet block.
const (
	maxClusterNameLen = 256
	// MaxFleetReply bounds the Gubernator answer read: a few requests'
	// answers are well under 4 KiB; a larger body is garbage.
	MaxFleetReply = 64 << 10
	// GubernatorPath is the gateway's endpoint for GetRateLimits.
	GubernatorPath = "/v1/GetRateLimits"
)

// defaultSyncInterval is a twentieth of the cycle, within the engine's
// bounds and at most a second.
func defaultSyncInterval(cycle time.Duration) time.Duration {
	return min(max(cycle/20, engine.MinSyncInterval), time.Second)
}

// rawFleet is the fleet block, each field undecoded.
type rawFleet struct {
	cluster, capacity, fallback, timeout, syncInterval json.RawMessage
}

func (r *rawFleet) field(name string) *json.RawMessage {
	switch name {
	case "cluster":
		return &r.cluster
	case "capacity":
		return &r.capacity
	case "fallback_capacity":
		return &r.fallback
	case "timeout":
		return &r.timeout
	case "sync_interval":
		return &r.syncInterval
	}
	return nil
}

// fleet parses the fleet block of a limit of the given capacity and cycle
// into cfg (engine's Fleet and the cluster); absent leaves cfg per process.
// The engine checks how its numbers relate (engine.Config.Validate).
func (p *fieldParser) fleet(field string, raw json.RawMessage, cfg *Config) {
	if !p.present(field, raw, "an object", false) {
		return
	}
	members, names, err := objectMembers(raw)
	if err != nil {
		p.fail(field, err.Error())
		return
	}
	var rf rawFleet
	for _, name := range names {
		dst := rf.field(name)
		if dst == nil {
			p.fail(field+"."+name, "unknown field")
			return
		}
		*dst = members[name]
	}
	cluster, ok := p.str(field+".cluster", rf.cluster, true)
	if ok && (cluster == "" || len(cluster) > maxClusterNameLen) {
		p.fail(field+".cluster", "must be an Envoy cluster name of 1 to "+strconv.Itoa(maxClusterNameLen)+" bytes")
	}
	capacity, cycle := cfg.Engine.Capacity, cfg.Engine.Cycle
	f := &engine.Fleet{
		Capacity: p.integer(field+".capacity", rf.capacity, 0, capacity, engine.MaxCapacity, true),
		Fallback: p.integer(field+".fallback_capacity", rf.fallback, 0, 0, capacity, true),
	}
	if cycle < 4*engine.MinSyncInterval {
		// (Callouts at most every cycle/4 and at least MinSyncInterval
		// apart: no sync_interval fits, its default included.)
		p.fail("cycle", "must be at least "+(4*engine.MinSyncInterval).String()+" with fleet (fleet.sync_interval is in ["+
			engine.MinSyncInterval.String()+", cycle/4]), got "+cycle.String())
		return
	}
	f.SyncInterval = p.duration(field+".sync_interval", rf.syncInterval, defaultSyncInterval(cycle), engine.MinSyncInterval, cycle/4, false)
	f.Timeout = p.duration(field+".timeout", rf.timeout, f.SyncInterval/2, 0, f.SyncInterval, false)
	cfg.Engine.Fleet, cfg.FleetCluster = f, cluster
}

// fleetTickPeriod lowers the tick period to the sync interval: the syncer
// checks on every tick whether a sync is due.
func (c *Config) fleetTickPeriod(p time.Duration) time.Duration {
	if c.Engine.Fleet == nil {
		return p
	}
	return min(p, c.Engine.Fleet.SyncInterval)
}

// FleetCall is one callout the host must send for limit Limit: a POST of
// Body to GubernatorPath on Cluster, given up after Timeout.
type FleetCall struct {
	Limit   int
	Cluster string
	Timeout time.Duration
	Body    []byte
	call    engine.LeaseCall
	retried bool
}

// Retry is the callout to send at once in place of c, when c got no
// answer (status 0: a timeout or no connection) or a gateway error
// (5xx, as Envoy answers when a peer refuses connections): Envoy's load
// balancer, and the outlier detection of envoy/fleet.yaml, take it to
// another peer, so one peer down costs no fallback. A call is retried
// once (engine.LeaseCall.Retry says what is sent again), and a dispatch
// the host refused is not: another attempt would be refused the same way.
func (c *FleetCall) Retry(status int) (FleetCall, bool) {
	if c.retried || (status != 0 && status < 500) || len(c.call.Hits) == 0 {
		return FleetCall{}, false
	}
	call := c.call.Retry()
	if len(call.Hits) == 0 {
		return FleetCall{}, false
	}
	return FleetCall{Limit: c.Limit, Cluster: c.Cluster, Timeout: c.Timeout,
		Body: appendLeaseRequest(nil, call), call: call, retried: true}, true
}

// FleetCalls runs the fleet step of every fleet limit at the current time
// and appends the callouts due to dst. Every worker calls it on every tick:
// it writes the worker's demand and keeps the syncer election.
func (f *Filter) FleetCalls(dst []FleetCall) []FleetCall {
	now := f.clock.Now()
	for i := range f.limits {
		l := &f.limits[i]
		if l.limiters == nil || l.cfg.Engine.Fleet == nil {
			continue
		}
		if call, ok := l.limiters[0].FleetCallAt(now); ok { // a fleet limit has one window
			dst = append(dst, FleetCall{
				Limit: i, Cluster: l.cfg.FleetCluster, Timeout: l.cfg.Engine.Fleet.Timeout,
				Body: appendLeaseRequest(nil, call), call: call,
			})
		}
	}
	return dst
}

// FleetDone applies the answer to c: the HTTP status and body, or err when
// the host could not send it or got no answer in time. Anything but a 200
// with one well-formed answer per request is a failure.
func (f *Filter) FleetDone(c *FleetCall, status int, body []byte, err error) engine.FleetEvent {
	var replies []engine.LeaseReply
	if err == nil {
		if status == 0 {
			err = &gubernatorError{"no answer within " + c.Timeout.String() + " (or no connection)"}
		} else if status != 200 {
			err = &gubernatorError{"HTTP status " + strconv.Itoa(status)}
		} else {
			replies, err = ParseLeaseReplies(body, len(c.call.Hits))
		}
	}
	return f.limits[c.Limit].limiters[0].FleetDoneAt(f.clock.Now(), c.call, replies, err)
}

// appendLeaseRequest is the GetRateLimits request of call, in JSON.
func appendLeaseRequest(dst []byte, call engine.LeaseCall) []byte {
	dst = append(dst, `{"requests":[`...)
	for i, h := range call.Hits {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = strconv.AppendQuote(dst, engine.FleetName)
		dst = append(dst, `,"unique_key":`...)
		dst = strconv.AppendQuote(dst, h.Key)
		dst = append(dst, `,"hits":`...)
		dst = strconv.AppendInt(dst, h.Hits, 10)
		dst = append(dst, `,"limit":`...)
		dst = strconv.AppendInt(dst, h.Limit, 10)
		dst = append(dst, `,"duration":`...)
		dst = strconv.AppendInt(dst, h.Duration.Milliseconds(), 10)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

type gubernatorError struct{ msg string }

func (e *gubernatorError) Error() string { return "gubernator: " + e.msg }

// gubernatorReply is one answer of GetRateLimits as its HTTP gateway writes
// it: proto names, 64-bit integers as strings.
type gubernatorReply struct {
	Status    string          `json:"status"`
	Remaining json.RawMessage `json:"remaining"`
	ResetTime json.RawMessage `json:"reset_time"`
	Error     string          `json:"error"`
}

// ParseLeaseReplies reads a GetRateLimits answer that must hold exactly n
// answers, each UNDER_LIMIT or OVER_LIMIT with a remaining count, an
// optional reset_time, and no error. Anything else is garbage, reported as an error, never a panic.
func ParseLeaseReplies(body []byte, n int) ([]engine.LeaseReply, error) {
	if len(body) > MaxFleetReply {
		return nil, &gubernatorError{"answer of " + strconv.Itoa(len(body)) + " bytes"}
	}
	var doc struct {
		Responses []gubernatorReply `json:"responses"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, &gubernatorError{"unreadable answer: " + err.Error()}
	}
	if len(doc.Responses) != n {
		return nil, &gubernatorError{strconv.Itoa(len(doc.Responses)) + " answers to " + strconv.Itoa(n) + " requests"}
	}
	out := make([]engine.LeaseReply, n)
	for i, r := range doc.Responses {
		if r.Error != "" {
			return nil, &gubernatorError{truncate(r.Error, 200)}
		}
		switch r.Status {
		case "UNDER_LIMIT":
		case "OVER_LIMIT":
			out[i].Over = true
		default:
			return nil, &gubernatorError{"status " + strconv.Quote(truncate(r.Status, 40))}
		}
		rem, ok := jsonInt(r.Remaining)
		if !ok || rem < 0 || rem > engine.MaxCapacity {
			return nil, &gubernatorError{"remaining " + truncate(string(r.Remaining), 40)}
		}
		out[i].Remaining = rem
		// reset_time tells a key's count from one created again (an
		// absent one, as protojson omits a zero, is unknown).
		if len(r.ResetTime) > 0 {
			reset, ok := jsonInt(r.ResetTime)
			if !ok || reset < 0 {
				return nil, &gubernatorError{"reset_time " + truncate(string(r.ResetTime), 40)}
			}
			out[i].Reset = reset
		}
	}
	return out, nil
}

// jsonInt reads an integer written as a JSON number or a JSON string (as
// protojson writes int64).
func jsonInt(raw json.RawMessage) (int64, bool) {
	s := string(raw)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
