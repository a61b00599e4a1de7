package engine

import "time"

// This file is the cycle state machine as pure functions of (state, demand,
// time): no store, no clock. The Limiter applies them through CAS.

// isDue reports whether the cycle must roll over at now: its deadline
// passed, or the wall clock stepped back by more than a cycle (smaller steps
// back are absorbed: workers read the clock at slightly different moments,
// and a cycle must not end because one read was early).
//
// A header written under another config is not due before its deadline.
// During a reconfiguration the old and the new config serve side by side
// on the same keys; if a mismatch made the cycle due, each would roll the
// other's cycle over on every request and hand out fresh shares each time.
// Instead every worker honours the running cycle, and whichever config
// rolls it over at the deadline sets the next one: a change takes effect
// within one cycle.
func isDue(h *header, cfg *Config, now int64) bool {
	return now >= h.deadline || now < h.start-int64(cfg.Cycle)
}

// earlyAllowed reports whether a newcomer may end the cycle now. MinCycle
// holds early rollovers back so that a flood of new ids cannot keep the
// cycle (and everyone's share) resetting. With no client registered there
// is nobody to disturb, so the first client never waits.
func earlyAllowed(h *header, cfg *Config, now int64) bool {
	return len(h.clients) == 0 || now-h.start >= int64(cfg.MinCycle) || now < h.start
}

// untilEarly is how long a pending newcomer waits for its early rollover.
func untilEarly(h *header, cfg *Config, now int64) time.Duration {
	return clampDuration(h.start + int64(cfg.MinCycle) - now)
}

func clampDuration(ns int64) time.Duration {
	if ns < 0 {
		return 0
	}
	return time.Duration(ns)
}

// rollScratch is reused across rollovers so that a steady-state rollover
// allocates only what the policy needs.
type rollScratch struct {
	slots   []int
	demands []float64
	shares  []int64
	isNew   []bool
}

// nextCycle computes the cycle that follows cur at now.
//
//   - demand[slot] is the attempts counted in cur for the client at slot. A
//     cycle ended early by a newcomer has its demand scaled to a full cycle
//     (see demandScale).
//   - Clients with no demand for IdleCycles consecutive cycles are forgotten,
//     which returns their share to the others.
//   - Pending newcomers and joiners are registered in free slots, counted as
//     demanding the default share (gap 0), while the table has room; the
//     rest are dropped and learn it as table_full on their next request.
//
// The result owns fresh slices: cur may be a worker's cached header.
func nextCycle(cur *header, demand []int64, joiners []uint64, now int64, cfg *Config, fp uint64, sc *rollScratch) header {
	next := header{
		fingerprint: fp,
		cycle:       cur.cycle + 1,
		start:       now,
		deadline:    now + int64(cfg.Cycle),
		early:       startedEarly(cur, joiners, now),
		clients:     make([]clientEntry, len(cur.clients), max(len(cur.clients), cfg.MaxClients)),
	}
	copy(next.clients, cur.clients)
	if len(next.clients) > cfg.MaxClients { // max_clients was lowered
		next.clients = next.clients[:cfg.MaxClients]
	}
	scale, silence := demandScale(cur, cfg, now)

	sc.slots, sc.demands, sc.isNew = sc.slots[:0], sc.demands[:0], sc.isNew[:0]
	for slot := range next.clients {
		c := &next.clients[slot]
		if c.hash == 0 {
			continue
		}
		d := int64(0)
		if slot < len(demand) {
			d = demand[slot]
		}
		if d > 0 {
			c.idle = 0
		} else {
			c.idle = satAdd32(c.idle, silence)
		}
		if int64(c.idle) >= int64(cfg.IdleCycles)*idleUnits {
			*c = clientEntry{} // forgotten
			continue
		}
		sc.slots = append(sc.slots, slot)
		sc.demands = append(sc.demands, float64(d)*scale)
		sc.isNew = append(sc.isNew, false)
	}
	for _, list := range [2][]uint64{cur.pending, joiners} {
		for _, h := range list {
			if next.slotOf(h) >= 0 {
				continue
			}
			slot := next.freeSlot(cfg.MaxClients)
			if slot < 0 {
				break
			}
			next.clients[slot] = clientEntry{hash: h}
			sc.slots = append(sc.slots, slot)
			sc.demands = append(sc.demands, 0)
			sc.isNew = append(sc.isNew, true)
		}
	}
	if n := len(sc.slots); n > 0 {
		def := float64(cfg.Capacity) / float64(n)
		for i := range sc.demands {
			if sc.isNew[i] {
				sc.demands[i] = def
			}
		}
		sc.shares = cfg.policy().Allocate(sc.shares, cfg.Capacity, sc.demands)
		for i, slot := range sc.slots {
			next.clients[slot].share = sc.shares[i]
		}
	}
	next.trimFreeTail()
	return next
}

// startedEarly reports whether the next cycle is started by newcomers
// rather than by cur's deadline: before that deadline, or from an empty
// table (the very first cycle included).
func startedEarly(cur *header, joiners []uint64, now int64) bool {
	if len(cur.clients) == 0 {
		return len(joiners)+len(cur.pending) > 0
	}
	return now < cur.deadline && now >= cur.start
}

// idleUnits is the resolution of idle time: 1/1024 of a cycle.
const idleUnits = 1024

// demandScale returns the factor that turns cur's demand into a full-cycle
// rate, and how long cur lasted in 1/idleUnits of a cycle (idle time for a
// client without demand in it).
//
// Any request at or after a deadline rolls the cycle over, so all of a
// cycle's demand fell within its first Cycle of time: a cycle that ran long
// (nobody came to end it, or the clock jumped) keeps its demand as is. Only
// a cycle ended early is scaled up, by Cycle/elapsed, with elapsed at least
// MinCycle. Idle time is measured, not counted in rollovers: early
// rollovers MinCycle apart must neither age a quiet client faster than the
// clock, nor, under a steady stream of newcomers, stop ageing it.
func demandScale(cur *header, cfg *Config, now int64) (float64, uint32) {
	elapsed := now - cur.start
	if len(cur.clients) == 0 || elapsed <= 0 {
		return 1, 0 // no history, or the clock stepped back: nobody ages
	}
	cycle := int64(cfg.Cycle)
	units := min(elapsed/cycle, 1<<20)*idleUnits + (elapsed%cycle)*idleUnits/cycle
	silence := uint32(min(units, 1<<31))
	if elapsed >= cycle {
		return 1, silence
	}
	return float64(cycle) / float64(max(elapsed, int64(cfg.MinCycle))), silence
}

// freeSlot returns the lowest free slot, growing the table up to max.
func (h *header) freeSlot(max int) int {
	for i, c := range h.clients {
		if c.hash == 0 {
			return i
		}
	}
	if len(h.clients) < max {
		h.clients = append(h.clients, clientEntry{})
		return len(h.clients) - 1
	}
	return -1
}

// trimFreeTail drops free slots at the end, keeping the header short.
func (h *header) trimFreeTail() {
	n := len(h.clients)
	for n > 0 && h.clients[n-1].hash == 0 {
		n--
	}
	h.clients = h.clients[:n]
}

func satAdd32(a, b uint32) uint32 {
	if s := uint64(a) + uint64(b); s <= 0xFFFFFFFF {
		return uint32(s)
	}
	return 0xFFFFFFFF
}
