package engine

import (
	"math"
)

// Pacing (Config.Pace) spreads a limit's capacity over the
// window instead of letting it all go at the window's start. Two rules,
// both pure functions of explicit times:
//
//   - per client: by fraction f of the window, a client may have been
//     granted at most share × (burst + (1 − burst) × f) (pacedAmount);
//   - per limit: a generic cell rate algorithm over the whole capacity,
//     one unit every cycle/capacity with a tolerance of burst × cycle
//     (paceFit), kept in one shared key. It forfeits what is not used, so
//     any interval of one cycle's length admits at most
//     (1 + burst) × capacity units (plus one, when burst × capacity < 1),
//     where fixed windows alone let up to 2 × capacity through across a
//     boundary.
//
// A paced lease takes only the units asked for, so units are granted when
// they are admitted and the bound holds for admissions, not just grants.

// pacedAmount is how much of share a client may have been granted by
// fraction f of the window: burst × share at once, the rest linearly.
// Rounded up, so a unit is available as soon as it starts to accrue.
func pacedAmount(share int64, burst, f float64) int64 {
	f = math.Max(0, math.Min(1, f))
	// (less a rounding hair, so that 100 × 0.6 is 60, not 61)
	return int64(math.Ceil(float64(share)*(burst+(1-burst)*f) - 1e-9))
}

// paceFit is the pacing cell rate algorithm: given the theoretical
// arrival time tat (Unix ns, 0 for a new limit) and a request for n units
// at now, it returns how many fit (m ≤ n) and the new tat. A unit fits
// when the units before it are no more than tolerance ahead of now;
// each unit moves tat by interval.
func paceFit(tat, now, n, interval, tolerance int64) (m, next int64) {
	base := max(tat, now)
	ahead := base - now
	if n <= 0 || ahead > tolerance {
		return 0, tat
	}
	m = min(n, (tolerance-ahead)/interval+1)
	return m, base + m*interval
}

// paceWait is how long after now the next unit fits under tat.
func paceWait(tat, now, tolerance int64) int64 { return max(0, tat-now-tolerance) }

// paceParams are the cell rate algorithm's interval and tolerance for a
// config: one unit every cycle/capacity, rounded up (rounded down, a cycle
// would hold a few more than capacity units), and burst × cycle less one
// interval (so that a burst is burst × capacity units, not one more).
func paceParams(cfg *Config) (interval, tolerance int64) {
	c := max(1, cfg.Capacity)
	interval = max(1, (int64(cfg.Cycle)+c-1)/c)
	tolerance = max(0, int64(float64(cfg.Cycle)*cfg.Burst)-interval)
	return interval, tolerance
}

// pacedAt is when a share's paced amount reaches units, in p's window.
func pacedAt(p *plan, cfg *Config, share, units int64) int64 {
	start, end := planWindow(p, cfg)
	b := cfg.Burst
	if b >= 1 || share <= 0 {
		return start
	}
	f := (float64(units)/float64(share) - b) / (1 - b)
	return start + int64(math.Ceil(math.Max(0, math.Min(1, f))*float64(end-start)))
}
