package engine

// The fleet record (<prefix>/f, in fleet mode): worker ids, the elected
// syncer, and what each window holds and asked (fleet.go). Written by
// fleetWorker.update only.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The fleet record's encoding: a version byte, five integers, the down flag,
// and fleetSlots slots of seven integers, little-endian.
const (
	fleetVersion = 2
	fleetLen     = 1 + 5*8 + 1 + fleetSlots*7*8 + sealLen
)

func appendFleet(dst []byte, s *fleetState) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], fleetVersion)
	dst = le.AppendUint64(dst, s.nextID)
	dst = le.AppendUint64(dst, s.syncer)
	dst = le.AppendUint64(dst, uint64(s.syncerUntil))
	dst = le.AppendUint64(dst, uint64(s.lastCall))
	dst = le.AppendUint64(dst, uint64(s.fallbackUntil))
	var down byte
	if s.down {
		down = 1
	}
	dst = append(dst, down)
	for _, sl := range s.slots {
		dst = le.AppendUint64(dst, uint64(sl.window))
		dst = le.AppendUint64(dst, uint64(sl.leased))
		dst = le.AppendUint64(dst, uint64(sl.asked))
		dst = le.AppendUint64(dst, uint64(sl.posted))
		dst = le.AppendUint64(dst, uint64(sl.total))
		dst = le.AppendUint64(dst, uint64(sl.used))
		dst = le.AppendUint64(dst, uint64(sl.rem))
	}
	return seal(dst)
}

// decodeFleet reads a fleet record, refusing values no writer produces: a
// record that holds more than a capacity could must not be trusted.
func decodeFleet(b []byte) (fleetState, error) {
	if len(b) != fleetLen || b[0] != fleetVersion || b[41] > 1 {
		return fleetState{}, fmt.Errorf("%w: fleet record of %d bytes", errCorrupt, len(b))
	}
	if _, err := unseal(b); err != nil {
		return fleetState{}, err
	}
	le := binary.LittleEndian
	u := func(i int) int64 { return int64(le.Uint64(b[i:])) }
	s := fleetState{
		nextID:        le.Uint64(b[1:]),
		syncer:        le.Uint64(b[9:]),
		syncerUntil:   u(17),
		lastCall:      u(25),
		fallbackUntil: u(33),
		down:          b[41] == 1,
	}
	for i := range s.slots {
		o := 42 + i*56
		sl := fleetSlot{window: u(o), leased: u(o + 8), asked: u(o + 16), posted: u(o + 24), total: u(o + 32), used: u(o + 40), rem: u(o + 48)}
		if !inRange(sl.leased) || !inRange(sl.asked) || !inRange(sl.posted) || !inRange(sl.total) || !inRange(sl.used) ||
			sl.rem < -1 || sl.rem > MaxCapacity {
			return fleetState{}, fmt.Errorf("%w: impossible fleet slot", errCorrupt)
		}
		s.slots[i] = sl
	}
	return s, nil
}

func inRange(n int64) bool { return n >= 0 && n <= MaxCapacity }

func (w *fleetWorker) read(store Store) (fleetState, uint32, error) {
	raw, cas, err := store.Get(w.key)
	if errors.Is(err, ErrNotFound) {
		return newFleetState(), casCreate, nil
	}
	if err != nil {
		return fleetState{}, 0, err
	}
	s, err := decodeFleet(raw)
	return s, cas, err
}

// update is the one read-modify-write of the fleet record: change edits the
// state and reports whether to write it. A record that cannot be read is
// started afresh (it holds nothing, so the budget grants nothing meanwhile).
func (w *fleetWorker) update(store Store, retries int, change func(s *fleetState) bool) error {
	return casUpdate(store, NopObserver{}, retries, w.key, "fleet", nil, func(st stored) ([]byte, error) {
		raw, missing := st.raw, st.missing
		s := newFleetState()
		if !missing {
			v, err := decodeFleet(raw)
			if err == nil {
				s = v
			}
		}
		if !change(&s) {
			return nil, nil
		}
		w.buf = appendFleet(w.buf[:0], &s)
		return w.buf, nil
	})
}
