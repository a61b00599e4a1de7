package engine

import (
	"math"
	"time"
)

// Bounds on the configuration. They keep every derived quantity (shares,
// counters, window indices) far from overflow.
const (
	MaxCapacity = 1 << 40
	// MaxCycle is the longest window: a week, for quotas such as "10,000
	// a day". What keeps a window's count is the shared data, which
	// outlives configuration reloads but not an Envoy restart.
	MaxCycle = 7 * 24 * time.Hour
	// MinCycleLength is the shortest cycle: Envoy's timers and ticks run in
	// milliseconds, so a shorter window could not be planned on time, and a
	// whole window could pass between two readings of one request.
	MinCycleLength = time.Millisecond
	MaxClientsCap  = 100_000
	MaxIdleCycles  = 1 << 16
)

// Config is what one limit needs. Every field is explicit; Defaults fills the
// optional ones the way the plugin documents them.
type Config struct {
	// Capacity is the number of units (requests, or their cost) admitted per
	// aligned window for the whole process, all clients together.
	Capacity int64
	// Cycle is the length of a window.
	Cycle time.Duration
	// WindowOffset shifts the aligned windows: window k spans
	// [k·Cycle + WindowOffset, (k+1)·Cycle + WindowOffset) on the Unix
	// epoch (see WindowAt). In [0, Cycle).
	WindowOffset time.Duration
	// Reservation is the seed policy's reservation fraction, in [0, 1].
	Reservation float64
	// Policy computes shares: Seed (nil means Seed{Reservation}), Static or
	// Fair, the closed set of policies (see Policy), by value or pointer.
	Policy Policy
	// Pace spreads the capacity over the window (rules.go, Pacing): a client may
	// spend Burst of its share at once and the rest accrues linearly, and
	// any interval of one cycle admits at most (1 + Burst) × Capacity.
	// Burst is in [0, 1]; it means nothing without Pace.
	Pace  bool
	Burst float64
	// Weights maps client ids to positive weights (default 1): a client
	// of weight w counts as w clients in every policy's equal split
	// (rules.go, Weights). At most MaxWeights entries.
	Weights       map[string]float64
	hashedWeights map[uint64]float64 // Weights by client hash, set by New
	// MaxShare caps what any one client may be granted in a window, in
	// units, even when capacity is idle; 0: no cap. Caps overrides it per
	// client id. What a cap keeps from a client goes to the others
	// (rules.go, Caps). Each in [1, Capacity]. At most MaxWeights entries.
	MaxShare   int64
	Caps       map[string]int64
	hashedCaps map[uint64]int64 // Caps by client hash, set by New
	// MaxClients bounds the client table (registered plus pending). A
	// newcomer beyond it is rejected with ReasonTableFull; it never evicts a
	// registered client.
	MaxClients int
	// MaxIDsPerPeer bounds the distinct client ids one peer (a source
	// address, an mTLS principal: see Limiter.AdmitFromAt) may use in a
	// window; its further ids are refused with ReasonTooManyIDs. 0: no
	// bound. At most MaxIDsPerPeerCap.
	MaxIDsPerPeer int
	// IdleCycles is how many windows without a request make a client
	// forgotten at the next plan, which returns its share.
	IdleCycles int
	// MinCycle is the shortest time between two plans of one window: a
	// newcomer re-plans the rest of the window only MinCycle after the last
	// plan, so a flood of new ids cannot keep re-planning everyone's share.
	// In (0, Cycle]; DefaultMinCycle by default.
	MinCycle time.Duration
	// Passthrough makes every decision admit, while still reporting what
	// enforce mode would have done.
	Passthrough bool
	// FailureModeDeny rejects requests when the shared store fails or CAS
	// retries run out; the default (false) admits them, like Envoy's rate
	// limit filters.
	FailureModeDeny bool
	// CASRetries bounds the compare-and-swap attempts of one operation.
	CASRetries int
	// KeyPrefix namespaces the store keys, so several limits can share one
	// Envoy vm_id.
	KeyPrefix string
	// Fleet, when set, leases the window budget from Gubernator so that a
	// fleet of processes shares one capacity (fleet.go); nil: per process.
	Fleet *Fleet
}

// MaxDefaultMinCycle bounds the default MinCycle: a newcomer that waits
// for a re-plan waits at most this long, even in a day-long window.
const MaxDefaultMinCycle = time.Minute

// DefaultMinCycle is MinCycle's default for a cycle: a tenth of it, at
// most MaxDefaultMinCycle, at least 1ns.
func DefaultMinCycle(cycle time.Duration) time.Duration {
	return max(min(cycle/10, MaxDefaultMinCycle), 1)
}

// Defaults returns a Config with the documented defaults for the optional
// fields.
func Defaults(capacity int64, cycle time.Duration) Config {
	return Config{
		Capacity:    capacity,
		Cycle:       cycle,
		Reservation: 0.1,
		MaxClients:  1000,
		IdleCycles:  3,
		MinCycle:    DefaultMinCycle(cycle),
		CASRetries:  64,
		KeyPrefix:   "borrowcycle",
	}
}

// Validate reports the first invalid field, in declaration order.
func (c Config) Validate() error {
	switch {
	case c.Capacity < 1 || c.Capacity > MaxCapacity:
		return fieldErr("capacity", "must be an integer in [1, %d], got %d", int64(MaxCapacity), c.Capacity)
	case c.Cycle < MinCycleLength || c.Cycle > MaxCycle:
		return fieldErr("cycle", "must be in [%s, %s], got %s", MinCycleLength, MaxCycle, c.Cycle)
	case c.WindowOffset < 0 || c.WindowOffset >= c.Cycle:
		return fieldErr("window_offset", "must be in [0s, cycle=%s), got %s", c.Cycle, c.WindowOffset)
	case math.IsNaN(c.Reservation) || c.Reservation < 0 || c.Reservation > 1:
		return fieldErr("reservation", "must be in [0, 1], got %v", c.Reservation)
	case math.IsNaN(c.Burst) || c.Burst < 0 || c.Burst > 1:
		return fieldErr("burst", "must be in [0, 1], got %v", c.Burst)
	case validateWeights(c.Weights) != nil:
		return validateWeights(c.Weights)
	case c.MaxShare < 0 || c.MaxShare > c.Capacity:
		return fieldErr("max_share", "must be an integer in [1, capacity=%d], got %d", c.Capacity, c.MaxShare)
	case validateCaps(c.Caps, c.Capacity) != nil:
		return validateCaps(c.Caps, c.Capacity)
	case c.MaxClients < 1 || c.MaxClients > MaxClientsCap:
		return fieldErr("max_clients", "must be in [1, %d], got %d", MaxClientsCap, c.MaxClients)
	case c.MaxIDsPerPeer < 0 || c.MaxIDsPerPeer > MaxIDsPerPeerCap:
		return fieldErr("max_ids_per_peer", "must be in [0, %d], got %d", MaxIDsPerPeerCap, c.MaxIDsPerPeer)
	case c.IdleCycles < 1 || c.IdleCycles > MaxIdleCycles:
		return fieldErr("idle_cycles", "must be in [1, %d], got %d", MaxIdleCycles, c.IdleCycles)
	case c.MinCycle <= 0 || c.MinCycle > c.Cycle:
		return fieldErr("min_cycle", "must be in (0, cycle=%s], got %s", c.Cycle, c.MinCycle)
	case c.CASRetries < 1 || c.CASRetries > 1000:
		return fieldErr("cas_retries", "must be in [1, 1000], got %d", c.CASRetries)
	case c.KeyPrefix == "" || len(c.KeyPrefix) > 128:
		return fieldErr("key_prefix", "must be 1 to 128 bytes, got %d", len(c.KeyPrefix))
	}
	return c.validateFleet()
}
