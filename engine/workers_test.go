package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/borrowcycle/borrowcycle/engine/enginetest"
	"github.com/borrowcycle/borrowcycle/internal/capcheck"
)

// These tests run W limiters, one goroutine each, over one store: the
// shape of W Envoy workers sharing shared data. Run them with -race.

type outcome struct {
	client string
	at     time.Time
	cost   int64
	d      Decision
}

// checkOutcomes feeds every admission to one capcheck.Checker, attributed
// to the aligned window of the time it was decided at and to the share
// period (plan id) it announced, and checks both invariants.
func checkOutcomes(t *testing.T, cfg Config, outs []outcome) *capcheck.Checker {
	t.Helper()
	c := capcheck.New(cfg.Capacity)
	for _, o := range outs {
		if o.d.Allowed && o.d.Reason == ReasonOK {
			k, _, _ := WindowAt(o.at, cfg.Cycle, cfg.WindowOffset)
			c.Admit(capcheck.Admission{Window: k, Period: o.d.Plan, Client: o.client, Share: o.d.Limit, Cost: max(o.cost, 1)})
		}
	}
	c.Check(t)
	return c
}

type cycleKey struct {
	cycle  uint64
	client string
}

type tally struct {
	admitted map[cycleKey]int64
	attempts map[cycleKey]int64
	limit    map[cycleKey]int64
}

// tallyOutcomes groups attempts and admissions by share period (plan id)
// and client, with the share announced, for the stranding and share checks.
func tallyOutcomes(t *testing.T, outs []outcome) tally {
	t.Helper()
	tl := tally{map[cycleKey]int64{}, map[cycleKey]int64{}, map[cycleKey]int64{}}
	for _, o := range outs {
		k := cycleKey{o.d.Plan, o.client}
		tl.attempts[k]++
		if o.d.Allowed {
			tl.admitted[k]++
		}
		if o.d.Reason == ReasonOK || o.d.Reason == ReasonOverLimit {
			tl.limit[k] = o.d.Limit
		}
	}
	return tl
}

// runCycle sends each worker its requests concurrently at time at, and
// returns every decision.
func runCycle(workers []*Limiter, perWorker [][]string, at time.Time) []outcome {
	var mu sync.Mutex
	var all []outcome
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			outs := make([]outcome, 0, len(perWorker[w]))
			for i, c := range perWorker[w] {
				ti := at.Add(time.Duration(i) * time.Microsecond)
				outs = append(outs, outcome{client: c, at: ti, cost: 1, d: workers[w].AdmitAt(ti, c)})
			}
			mu.Lock()
			all = append(all, outs...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	return all
}

// spread deals each client's attempts to random workers, shuffled.
func spread(rng *rand.Rand, demand map[string]int, w int) [][]string {
	out := make([][]string, w)
	for c, n := range demand {
		for i := 0; i < n; i++ {
			k := rng.IntN(w)
			out[k] = append(out[k], c)
		}
	}
	for _, reqs := range out {
		rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	}
	return out
}

func newWorkers(t *testing.T, w int, cfg Config, store func() Store) []*Limiter {
	t.Helper()
	ws := make([]*Limiter, w)
	for i := range ws {
		ws[i] = newLimiter(t, cfg, store())
	}
	return ws
}

var clientNames = []string{"c00", "c01", "c02", "c03", "c04", "c05", "c06", "c07", "c08", "c09", "c10", "c11"}

func randomDemand(rng *rand.Rand, capacity int) map[string]int {
	d := map[string]int{}
	for i, c := range clientNames {
		switch i % 3 {
		case 0: // heavy: well over any share
			d[c] = capacity/4 + rng.IntN(capacity/2)
		case 1: // light
			d[c] = rng.IntN(capacity / 40)
		default: // around the default share
			d[c] = rng.IntN(capacity / 6)
		}
	}
	return d
}

// The cap is exact, nothing is stranded, and the shares equal what one
// engine computes from the same demand. Traffic arrives in rounds across
// the cycle on every worker, with a tick between rounds, as in Envoy.
func TestWorkersShareOneExactLimit(t *testing.T) {
	const rounds = 10
	for _, w := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("W=%d", w), func(t *testing.T) {
			cfg := Defaults(1200, 10*time.Second)
			shared := NewMemStore()
			workers := newWorkers(t, w, cfg, func() Store { return shared })
			if err := workers[0].RegisterAt(t0, clientNames...); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var prevDemand map[string]int64
			for cycle := 0; cycle < 6; cycle++ {
				start := t0.Add(time.Duration(cycle) * cfg.Cycle)
				demand := randomDemand(rng, int(cfg.Capacity))
				var outs []outcome
				for r := 0; r < rounds; r++ {
					at := start.Add(time.Duration(r) * cfg.Cycle / rounds)
					outs = append(outs, runCycle(workers, spread(rng, splitRound(demand, r, rounds), w), at)...)
					// Envoy ticks every worker: demand is written back and
					// leases unused since the last tick are returned.
					for _, l := range workers {
						l.TickAt(at.Add(cfg.Cycle/rounds - time.Millisecond))
					}
				}
				tl := tallyOutcomes(t, outs)
				checkOutcomes(t, cfg, outs)
				checkStranding(t, tl, w)
				if prevDemand != nil {
					checkSharesMatchOneEngine(t, tl, cfg, prevDemand)
				}
				prevDemand = map[string]int64{}
				for _, c := range clientNames {
					prevDemand[c] = int64(demand[c])
				}
			}
		})
	}
}

// splitRound is round r's part of each client's demand, spread evenly.
func splitRound(demand map[string]int, r, rounds int) map[string]int {
	out := make(map[string]int, len(demand))
	for c, n := range demand {
		out[c] = n*(r+1)/rounds - n*r/rounds
	}
	return out
}

// checkStranding: a client that asked for no more than its share got all
// of it, and one that asked for more got at least 99% of a share of 100 or
// more (share − W of a smaller one): leases left in other workers strand
// little.
func checkStranding(t *testing.T, tl tally, w int) {
	t.Helper()
	for k, attempts := range tl.attempts {
		limit, admitted := tl.limit[k], tl.admitted[k]
		if attempts <= limit {
			if admitted != attempts {
				t.Fatalf("plan %d client %s: %d attempts within share %d, admitted %d", k.cycle, k.client, attempts, limit, admitted)
			}
			continue
		}
		floor := limit - int64(w)
		if limit >= 100 {
			floor = (limit*99 + 99) / 100
		}
		if admitted < floor {
			t.Fatalf("plan %d client %s: demand %d > share %d but admitted only %d (< %d): capacity stranded",
				k.cycle, k.client, attempts, limit, admitted, floor)
		}
	}
}

func checkSharesMatchOneEngine(t *testing.T, tl tally, cfg Config, prevDemand map[string]int64) {
	t.Helper()
	want := allocateInOrder(cfg.Capacity, cfg.Reservation, clientNames, prevDemand)
	for k, limit := range tl.limit {
		if limit != want[k.client] {
			t.Fatalf("plan %d client %s share %d, one engine on the same demand gives %d (demand %v, want %v)",
				k.cycle, k.client, limit, want[k.client], prevDemand, want)
		}
	}
}

// With CAS mismatches, store errors and garbage writes injected, both
// invariants hold in every window and share period (failures deny, so only
// leased units admit), and the limit still admits.
func TestWorkersKeepTheCapUnderFaults(t *testing.T) {
	for _, w := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("W=%d", w), func(t *testing.T) {
			cfg := Defaults(600, 10*time.Second)
			cfg.FailureModeDeny = true
			cfg.MinCycle = time.Second
			shared := NewMemStore()
			seed := uint64(0)
			workers := newWorkers(t, w, cfg, func() Store {
				seed++
				return enginetest.NewFaultyStore(shared, enginetest.Faults{Mismatch: 0.05, Error: 0.01, Corrupt: 0.002, Seed: seed})
			})
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			var outs []outcome
			for cycle := 0; cycle < 8; cycle++ {
				start := t0.Add(time.Duration(cycle) * cfg.Cycle)
				demand := randomDemand(rng, int(cfg.Capacity))
				demand[fmt.Sprintf("late-%d", cycle)] = 20 // a newcomer per window: a re-plan
				outs = append(outs, runCycle(workers, spread(rng, demand, w), start.Add(2*time.Second))...)
				outs = append(outs, runCycle(workers, spread(rng, demand, w), start.Add(4*time.Second))...)
				for _, l := range workers {
					l.TickAt(start.Add(5 * time.Second))
				}
			}
			if c := checkOutcomes(t, cfg, outs); c.Admitted() < int64(cfg.Capacity) {
				t.Fatalf("admitted %d in 8 windows: the fault rates starve the protocol", c.Admitted())
			}
		})
	}
}

// Exactly one worker performs each rollover, even when all of them reach
// the deadline at once.
func TestOneRolloverPerCycle(t *testing.T) {
	for _, w := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("W=%d", w), func(t *testing.T) {
			cfg := Defaults(100, time.Second)
			shared := NewMemStore()
			counters := make([]*countingObserver, w)
			workers := make([]*Limiter, w)
			for i := range workers {
				counters[i] = &countingObserver{}
				l, err := New(cfg, shared, WithObserver(counters[i]))
				if err != nil {
					t.Fatal(err)
				}
				workers[i] = l
			}
			if err := workers[0].RegisterAt(t0, "a", "b"); err != nil {
				t.Fatal(err)
			}
			const cycles = 20
			for c := 1; c <= cycles; c++ {
				at := t0.Add(time.Duration(c) * time.Second)
				reqs := make([][]string, w)
				for i := range reqs {
					reqs[i] = []string{"a", "b", "a"}
				}
				runCycle(workers, reqs, at)
			}
			total := 0
			for _, c := range counters {
				total += c.rollovers
			}
			// RegisterAt made the first cycle; each later second made one.
			if total != cycles+1 {
				t.Fatalf("%d rollovers over %d deadlines, want exactly one each (+1 for registration)", total, cycles)
			}
		})
	}
}

type countingObserver struct {
	NopObserver
	rollovers, retries, failures int
}

func (o *countingObserver) Rollover(RolloverEvent)     { o.rollovers++ }
func (o *countingObserver) CASRetry()                  { o.retries++ }
func (o *countingObserver) StoreFailure(string, error) { o.failures++ }
