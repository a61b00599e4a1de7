package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

type logObs struct {
	NopObserver
	w int
	t *testing.T
}

func (o logObs) Rollover(ev RolloverEvent)         { o.t.Logf("w%d rollover %+v", o.w, ev) }
func (o logObs) ValueReset(key string, err error)  { o.t.Logf("w%d reset %s: %v", o.w, key, err) }
func (o logObs) StoreFailure(op string, err error) { o.t.Logf("w%d failure %s: %v", o.w, op, err) }

func TestDebugCorrupt(t *testing.T) {
	w := 4
	cfg := Defaults(600, 10*time.Second)
	cfg.FailureModeDeny = true
	cfg.MinCycle = time.Second
	shared := &logStore{MemStore: NewMemStore(), t: t}
	workers := make([]*Limiter, w)
	for i := range workers {
		l, _ := New(cfg, NewFaultyStore(shared, Faults{Corrupt: 0.02, Seed: uint64(i + 1)}), WithObserver(logObs{w: i, t: t}))
		workers[i] = l
	}
	rng := rand.New(rand.NewPCG(uint64(w), 102))
	var outs []outcome
	for cycle := 0; cycle < 8; cycle++ {
		start := t0.Add(time.Duration(cycle) * cfg.Cycle)
		demand := randomDemand(rng, int(cfg.Capacity))
		demand[fmt.Sprintf("late-%d", cycle)] = 20
		outs = append(outs, runCycle(workers, spread(rng, demand, w), start.Add(2*time.Second))...)
		outs = append(outs, runCycle(workers, spread(rng, demand, w), start.Add(4*time.Second))...)
		for _, l := range workers {
			l.TickAt(start.Add(5 * time.Second))
		}
	}
	tl := tallyOutcomes(t, outs)
	for k, admitted := range tl.admitted {
		if admitted > tl.limit[k] {
			t.Errorf("cycle %d client %s admitted %d > share %d slot=%d", k.cycle, k.client, admitted, tl.limit[k], workers[0].index[HashID(k.client)])
		}
	}
}

type logStore struct {
	*MemStore
	t *testing.T
}

func (s *logStore) Set(key string, v []byte, cas uint32) error {
	err := s.MemStore.Set(key, v, cas)
	if err == nil {
		sv, derr := decodeSlot(v)
		if derr != nil || (sv.hash == HashID("c06") && sv.cycle == 5) {
			s.t.Logf("SET %s cas=%d -> %+v %v", key, cas, sv, derr)
		}
	}
	return err
}
