package filter

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/borrowcycle/borrowcycle/engine"
)

// The configuration's schema: every field of a limit, declared once, in
// one order. Fields are parsed in that order, so that with several wrong
// the first is reported; the info line shows them in it; and
// docs/contract.md's field table lists them in it, with the same type,
// default, valid values and meaning (TestContractTableIsTheSchema).

// field is one field of the configuration.
type field struct {
	name                     string
	typ, def, valid, meaning string // the contract table's columns
	// raw is where the field's undecoded value is kept.
	raw func(r *rawConfig) *json.RawMessage
	// parse reads the field's value v (nil when absent) into c, whose
	// capacity and cycle are parsed; nil for the fields read otherwise:
	// capacity, cycle and windows (first, by parseLimit: the others'
	// bounds depend on them), client_header (with client_id), limits and
	// unlimited (limits.go).
	parse func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config)
	// show is the field's value in the info line; nil: not shown there
	// (the name heads the limit's part; cycle and windows are in capacity's).
	show func(c *Config) string
}

// schema is every field, in the contract's order.
var schema = []field{
	{name: "capacity", typ: "integer", def: "required (unless `windows`)",
		valid:   "1 to 1099511627776 (2^40)",
		meaning: "units (requests times `cost`) per aligned window (see Windows and newcomers) for this Envoy process, all clients together",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Capacity },
		show:    func(c *Config) string { return spans(c) },
	},
	{name: "cycle", typ: "duration", def: "required (unless `windows`)",
		valid:   "[1ms, 168h]",
		meaning: "length of a window (Envoy's timers run in milliseconds: a shorter window could not be planned on time; for windows of hours or days see Long windows)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Cycle },
	},
	{name: "windows", typ: "array", def: "absent: one window, `capacity` per `cycle`",
		valid:   "2 to 4 objects `{\"capacity\": …, \"cycle\": …}` of distinct cycles, each in the bounds above; not with `capacity`, `cycle`, `fleet`, `max_share` or `caps`",
		meaning: "several windows, every one of which must admit a request (see Several windows)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Windows },
	},
	{name: "reservation", typ: "number", def: "`0.1`",
		valid:   "[0, 1]",
		meaning: "fraction of the default share an idle client keeps",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Reservation },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.Reservation = p.number(f, v, c.Engine.Reservation, 0, 1)
		},
		show: func(c *Config) string { return fmt.Sprint(c.Engine.Reservation) },
	},
	{name: "client_header", typ: "string", def: "`\"x-client-id\"`",
		valid:   "HTTP header name, 1–256 token characters; matched case-insensitively",
		meaning: "request header that identifies the client: the short form of `client_id` `{\"from\": \"header\", \"header\": …}`",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.ClientHeader },
	},
	{name: "client_id", typ: "object", def: "`{\"from\": \"header\", \"header\": \"x-client-id\"}`",
		valid:   "see Client id; not with `client_header`",
		meaning: "where the client id comes from: a request header, the source address, the mTLS peer's URI SAN, or a value in the dynamic metadata (see Client id and Security)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.ClientID },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.ClientID = p.clientID(r)
			c.ClientHeader = c.ClientID.Header
		},
		show: func(c *Config) string { return c.ClientID.String() },
	},
	{name: "mode", typ: "string", def: "`\"enforce\"`",
		valid:   "`\"enforce\"`, `\"passthrough\"`",
		meaning: "passthrough counts would-be rejections and never rejects",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Mode },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Passthrough = p.enum(f, v, "enforce", "enforce", "passthrough") == "passthrough"
			c.Engine.Passthrough = c.Passthrough
		},
		show: func(c *Config) string { return modeName(c.Passthrough) },
	},
	{name: "max_clients", typ: "integer", def: "`1000`",
		valid:   "1 to 100000",
		meaning: "clients tracked (registered and pending); newcomers beyond get `table_full`",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.MaxClients },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.MaxClients = int(p.integer(f, v, int64(c.Engine.MaxClients), 1, engine.MaxClientsCap, false))
		},
		show: func(c *Config) string { return fmt.Sprint(c.Engine.MaxClients) },
	},
	{name: "idle_cycles", typ: "integer", def: "`3`",
		valid:   "1 to 65536",
		meaning: "a client idle for this many windows is forgotten",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.IdleCycles },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.IdleCycles = int(p.integer(f, v, int64(c.Engine.IdleCycles), 1, engine.MaxIdleCycles, false))
		},
		show: func(c *Config) string { return fmt.Sprint(c.Engine.IdleCycles) },
	},
	{name: "min_cycle", typ: "duration", def: "`cycle/10`, at most `1m` (at least 1ns)",
		valid:   "(0, `cycle`]",
		meaning: "shortest time between two plans of a window (under `fair`, between two re-plans): newcomers re-plan at most this often",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.MinCycle },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.MinCycle = p.duration(f, v, c.Engine.MinCycle, 0, c.Engine.Cycle, false)
		},
		show: func(c *Config) string { return c.Engine.MinCycle.String() },
	},
	{name: "window_offset", typ: "duration", def: "`0s`",
		valid:   "[0, `cycle`)",
		meaning: "where windows start: window *k* is [*k*·`cycle` + offset, (*k*+1)·`cycle` + offset) on the Unix epoch",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.WindowOffset },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.WindowOffset = p.windowOffset(f, v, c.Engine.Cycle)
		},
		show: func(c *Config) string { return c.Engine.WindowOffset.String() },
	},
	{name: "retry_after_jitter", typ: "duration", def: "`0s`",
		valid:   "[0, `cycle`]",
		meaning: "a refusal's `retry-after` and reset are moved later by a uniform random delay up to this, so that clients refused together do not retry together; a pacer's turn is not moved (see Responses)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.RetryAfterJitter },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.RetryAfterJitter = p.delay(f, v, c.Engine.Cycle)
		},
		show: func(c *Config) string { return c.RetryAfterJitter.String() },
	},
	{name: "max_wait", typ: "duration", def: "`0s` (never hold)",
		valid:   "[0, min(`cycle`, 1m)]",
		meaning: "a request the limit would refuse `over_limit`, whose unit comes within this of its arrival, is held (its stream paused) and admitted when the unit comes, instead of refused (see Held requests)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.MaxWait },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.MaxWait = p.delay(f, v, min(c.Engine.Cycle, maxMaxWait))
		},
		show: func(c *Config) string { return c.MaxWait.String() },
	},
	{name: "max_waiting", typ: "integer", def: "`1000`",
		valid:   "1 to 100000",
		meaning: "requests one worker holds for this limit at once; a request beyond it gets its reply at once",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.MaxWaiting },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.MaxWaiting = int(p.integer(f, v, DefaultMaxWaiting, 1, maxMaxWaiting, false))
		},
		show: func(c *Config) string { return fmt.Sprint(c.MaxWaiting) },
	},
	{name: "failure_mode_deny", typ: "boolean", def: "`false`",
		valid:   "",
		meaning: "on a shared-data error: false admits, at most capacity/16 units (at least 1) per window on each worker, and rejects past that; true rejects with `store_failure`. Contention is not an error: see `contended`",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.FailureModeDeny },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.FailureModeDeny = p.boolean(f, v, false)
		},
		show: func(c *Config) string { return fmt.Sprint(c.Engine.FailureModeDeny) },
	},
	{name: "rate_limit_headers", typ: "string", def: "`\"x-ratelimit\"`",
		valid:   "`\"x-ratelimit\"`, `\"ietf\"`, `\"none\"`",
		meaning: "header style (see Responses)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.RateLimitHeaders },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.RateLimitHeaders = HeaderStyle(indexOf(styleNames[:], p.enum(f, v, styleNames[0], styleNames[:]...)))
		},
		show: func(c *Config) string { return c.RateLimitHeaders.String() },
	},
	{name: "headers_on_allowed", typ: "boolean", def: "`true`",
		valid:   "",
		meaning: "add the rate-limit headers to admitted responses too",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.HeadersOnAllowed },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.HeadersOnAllowed = p.boolean(f, v, true)
		},
		show: func(c *Config) string { return fmt.Sprint(c.HeadersOnAllowed) },
	},
	{name: "status_code", typ: "integer", def: "`429`",
		valid:   "400 to 599",
		meaning: "status of local rejections",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.StatusCode },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.StatusCode = uint32(p.integer(f, v, DefaultStatusCode, 400, 599, false))
		},
		show: func(c *Config) string { return fmt.Sprint(c.StatusCode) },
	},
	{name: "max_client_id_bytes", typ: "integer", def: "`256`",
		valid:   "1 to 4096",
		meaning: "longer ids count as anonymous",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.MaxClientIDBytes },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.MaxClientIDBytes = int(p.integer(f, v, DefaultMaxClientIDBytes, 1, maxClientIDBytesLimit, false))
		},
		show: func(c *Config) string { return fmt.Sprint(c.MaxClientIDBytes) },
	},
	{name: "max_ids_per_peer", typ: "integer", def: "`0` (no bound)",
		valid:   "0 to 16",
		meaning: "distinct client ids one peer may use in a window; its further ids are refused `too_many_ids` until the window ends (see Security)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.MaxIDsPerPeer },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.MaxIDsPerPeer = int(p.integer(f, v, 0, 0, engine.MaxIDsPerPeerCap, false))
		},
		show: func(c *Config) string { return fmt.Sprint(c.Engine.MaxIDsPerPeer) },
	},
	{name: "peer", typ: "string", def: "`\"source_address\"`",
		valid:   "`\"source_address\"` or `\"peer_principal\"`",
		meaning: "what `max_ids_per_peer` counts ids per: the downstream address (as `client_id`'s `source_address` reads it) or the mTLS peer's URI SAN, of any length (`max_client_id_bytes` bounds client ids only); a request without one is not bounded",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Peer },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Peer = p.peer(f, v)
		},
		show: func(c *Config) string { return c.Peer.String() },
	},
	{name: "name", typ: "string", def: "`\"default\"`",
		valid:   "`[a-z0-9_]{1,64}`",
		meaning: "names this limit: shared-data key prefix, metric names, `ratelimit-policy`",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Name },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Name = p.name(f, v, DefaultName)
		},
	},
	{name: "debug_headers", typ: "boolean", def: "`false`",
		valid:   "",
		meaning: "add `x-borrowcycle-plan: <plan id>` to every response, and `x-borrowcycle-waited` to a held request's (see Held requests)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.DebugHeaders },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.DebugHeaders = p.boolean(f, v, false)
		},
		show: func(c *Config) string { return fmt.Sprint(c.DebugHeaders) },
	},
	{name: "access_log", typ: "boolean", def: "`true`",
		valid:   "",
		meaning: "set the access-log record on the requests this limit decides (see Access log)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.AccessLog },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.AccessLog = p.boolean(f, v, true)
		},
		show: func(c *Config) string { return fmt.Sprint(c.AccessLog) },
	},
	{name: "log_client_id", typ: "boolean", def: "`false`",
		valid:   "",
		meaning: "the access-log record carries the raw client id (see Access log)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.LogClientID },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.LogClientID = p.boolean(f, v, false)
		},
		show: func(c *Config) string { return fmt.Sprint(c.LogClientID) },
	},
	{name: "cost", typ: "integer", def: "`1`",
		valid:   "1 to 1048576, at most `capacity`",
		meaning: "units each request this limit decides takes from the client's share",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Cost },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Cost = p.integer(f, v, 1, 1, maxCost, false)
		},
		show: func(c *Config) string { return fmt.Sprint(c.Cost) },
	},
	{name: "match", typ: "object", def: "every request",
		valid:   "see Several limits",
		meaning: "which requests this limit decides; others pass unlimited",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Match },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Match = p.match(f, v)
		},
		show: func(c *Config) string { return c.Match.String() },
	},
	{name: "limits", typ: "array", def: "",
		valid:   "1 to 64 limits",
		meaning: "several limits in one filter (see Several limits)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Limits },
	},
	{name: "unlimited", typ: "boolean", def: "`false`",
		valid:   "only in an element of `limits`, with `name` and `match` alone",
		meaning: "the element is a rule whose requests pass unlimited, without rate-limit headers (see Several limits)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Unlimited },
	},
	{name: "policy", typ: "string", def: "`\"seed\"`",
		valid:   "`\"seed\"`, `\"fair\"`, `\"static\"`",
		meaning: "how shares are computed (see The fair policy, pacing and weights)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Policy },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.Policy = p.policy(f, v)
		},
		show: func(c *Config) string { return policyName(c.Engine.Policy) },
	},
	{name: "burst", typ: "number", def: "absent: not paced",
		valid:   "[0, 1]",
		meaning: "turns pacing on: the fraction of a share spendable at once (see The fair policy, pacing and weights)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Burst },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.Pace, c.Engine.Burst = p.burst(f, v)
		},
		show: func(c *Config) string { return burstShown(&c.Engine) },
	},
	{name: "weights", typ: "object", def: "every client 1",
		valid:   "up to 10000 entries: client id (1–256 bytes) to a number in [0.001, 1000]",
		meaning: "a client of weight *w* counts as *w* clients in the equal split (see The fair policy, pacing and weights)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Weights },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.Weights = p.weights(f, v)
		},
		show: func(c *Config) string { return countShown(len(c.Engine.Weights), "client", "none") },
	},
	{name: "max_share", typ: "integer", def: "absent: no cap",
		valid:   "1 to `capacity`, at least `cost`; not with `fleet`",
		meaning: "the most units any one client is granted in a window, even when capacity is idle (see Caps)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.MaxShare },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.MaxShare = p.integer(f, v, 0, 1, c.Engine.Capacity, false)
		},
		show: func(c *Config) string { return countShown(int(c.Engine.MaxShare), "", "none") },
	},
	{name: "caps", typ: "object", def: "absent: `max_share` for every client",
		valid:   "up to 10000 entries: client id (1–256 bytes) to an integer in [1, `capacity`], at least `cost`; not with `fleet`",
		meaning: "a client's own cap, in place of `max_share` (see Caps)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Caps },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			c.Engine.Caps = p.caps(f, v, c.Engine.Capacity)
		},
		show: func(c *Config) string { return countShown(len(c.Engine.Caps), "client", "none") },
	},
	{name: "fleet", typ: "object", def: "absent: this Envoy alone",
		valid:   "see Fleet mode",
		meaning: "one capacity across several Envoys, leased from Gubernator (see Fleet mode)",
		raw:     func(r *rawConfig) *json.RawMessage { return &r.Fleet },
		parse: func(p *fieldParser, f string, v json.RawMessage, r *rawConfig, c *Config) {
			p.fleet(f, v, c)
		},
		show: func(c *Config) string { return fleetShown(c) },
	},
}

// fieldIndex finds a field by its name (rawConfig.field).
var fieldIndex map[string]*field

func init() {
	fieldIndex = make(map[string]*field, len(schema))
	for i := range schema {
		fieldIndex[schema[i].name] = &schema[i]
	}
}

// field returns where the field called exactly name goes, nil if unknown.
func (r *rawConfig) field(name string) *json.RawMessage {
	if f := fieldIndex[name]; f != nil {
		return f.raw(r)
	}
	return nil
}

// parseFields parses every field of the schema that parses itself, in
// its order.
func (p *fieldParser) parseFields(r *rawConfig, c *Config) {
	for i := range schema {
		if f := &schema[i]; f.parse != nil {
			f.parse(p, f.name, *f.raw(r), r, c)
		}
	}
}

// limitSummary is a limit's part of the info line: every field it has,
// as the schema shows it.
func limitSummary(c *Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "limit %q:", c.Name)
	if c.Unlimited {
		b.WriteString(" match " + c.Match.String() + ", unlimited")
		return b.String()
	}
	sep := " "
	for i := range schema {
		if f := &schema[i]; f.show != nil {
			b.WriteString(sep + f.name + " " + f.show(c))
			sep = ", "
		}
	}
	return b.String()
}

// spans is the limit's windows as the info line shows them.
func spans(c *Config) string {
	var s []string
	for _, w := range c.EngineWindows() {
		s = append(s, fmt.Sprintf("%d per %s", w.Engine.Capacity, w.Engine.Cycle))
	}
	return strings.Join(s, " and ")
}

func modeName(passthrough bool) string {
	if passthrough {
		return "passthrough"
	}
	return "enforce"
}

func burstShown(e *engine.Config) string {
	if !e.Pace {
		return "unpaced"
	}
	return fmt.Sprint(e.Burst)
}

// countShown is n, or none when 0; unit names what is counted.
func countShown(n int, unit, none string) string {
	switch {
	case n == 0:
		return none
	case unit == "":
		return fmt.Sprint(n)
	case n == 1:
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func fleetShown(c *Config) string {
	f := c.Engine.Fleet
	if f == nil {
		return "none"
	}
	return fmt.Sprintf("{cluster %q, capacity %d, fallback_capacity %d, sync_interval %s, timeout %s}",
		c.FleetCluster, f.Capacity, f.Fallback, f.SyncInterval, f.Timeout)
}
