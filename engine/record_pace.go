package engine

// The pace record (recordKey "pace", with Config.Pace): the theoretical
// arrival time of the limit's cell rate algorithm, and the turns it gave
// refused clients (rules.go holds the arithmetic). Written by paced only.

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
)

const (
	paceVersion = 3
	paceLen     = 10 + sealLen // version, tat, number of turns, seal
	paceTurnLen = 12           // client (4), time (8)
)

// pace is the pace record's value.
type pace struct {
	tat   int64
	turns []turn // sorted by time (turnAt)
}

func appendPace(dst []byte, v pace) []byte {
	dst = binary.LittleEndian.AppendUint64(append(dst[:0], paceVersion), uint64(v.tat))
	dst = append(dst, byte(len(v.turns)))
	for _, u := range v.turns {
		dst = binary.LittleEndian.AppendUint32(dst, u.client)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(u.at))
	}
	return seal(dst)
}

func decodePace(b []byte) (pace, error) {
	if len(b) < paceLen || b[0] != paceVersion || int(b[9]) > maxTurns || len(b) != paceLen+int(b[9])*paceTurnLen {
		return pace{}, fmt.Errorf("%w: pace of %d bytes", errCorrupt, len(b))
	}
	b, err := unseal(b)
	if err != nil {
		return pace{}, err
	}
	le := binary.LittleEndian
	v := pace{tat: int64(le.Uint64(b[1:]))}
	for i := 0; i < int(b[9]); i++ {
		e := b[10+i*paceTurnLen:]
		v.turns = append(v.turns, turn{client: le.Uint32(e), at: int64(le.Uint64(e[4:]))})
	}
	if !slices.IsSortedFunc(v.turns, func(a, b turn) int { return cmp.Compare(a.at, b.at) }) {
		return pace{}, fmt.Errorf("%w: impossible pace", errCorrupt)
	}
	return v, nil
}

// paced passes got units just taken from the window budget through the
// pacer for client at t, for a request that needs need of them: it returns
// how many pacing lets through, none when fewer than need fit (the caller
// gives the rest back to the budget). A client refused under pacing
// gets its turn (see turnAt): when the pacer holds back the request's one
// unit, or, with got 0, when something else refused it and it could
// succeed alone from after. What held it back, and its turn, are returned
// for its Retry-After. A client that takes a unit gives up its turn. An
// unreadable pace key is rewritten from now: pacing is a smoothing bound,
// and the window budget still holds.
func (r *view) paced(got, need, t int64, client uint32, after int64) (int64, held) {
	if !r.cfg.Pace || (got <= 0 && after <= 0) {
		return got, held{}
	}
	key := r.paceKey
	pp := paceParams(r.cfg)
	horizon := turnHorizon(r.cfg)
	var m, next, told int64
	err := r.update(key, "pace", nil, func(st stored) ([]byte, error) {
		m, next, told = 0, 0, 0
		var v pace
		if !st.missing {
			var err error
			if v, err = decodePace(st.raw); err != nil {
				r.obs.ValueReset(key, err)
				v = pace{}
			} else if v.tat-t > int64(r.cfg.Cycle)+pp.tolerance {
				// No unit is paced more than a cycle past its tolerance: this
				// pace was set by a clock that read far ahead. Kept, it would
				// admit nothing until the clock got there. (A worker with no
				// units to pass, whose clock may be the one behind, leaves it
				// and gives no turn.)
				if got <= 0 {
					return nil, nil
				}
				r.obs.ValueReset(key, errCorrupt)
				v = pace{}
			}
		}
		var before [maxTurns]turn
		given := before[:copy(before[:], v.turns)]
		v.turns = settleTurns(v.turns, client, t, 2*horizon)
		next = v.tat
		if got > 0 {
			// A request that needs more units than fit takes none: the
			// pacer keeps them for a request that fits (were they spent,
			// a request of several units could wait forever).
			if m, next = paceFit(v.tat, t, got, pp); m < need {
				m, next = 0, v.tat
			}
			v.tat = next
		}
		switch {
		case m < got && need == 1:
			told, v.turns = addTurn(v.turns, client, next, t, t+pp.interval, horizon, pp)
		case got <= 0:
			told, v.turns = addTurn(v.turns, client, next, t, after, horizon, pp)
		}
		if m == 0 && slices.Equal(given, v.turns) {
			return nil, nil // nothing changed
		}
		r.buf = appendPace(r.buf, v)
		return r.buf, nil
	})
	switch {
	case err != nil:
		return 0, held{}
	case m < got:
		return m, held{clipped: true, paceAt: t + max(pp.interval, paceWait(next, t, need, pp)), turnAt: told}
	case got <= 0:
		return 0, held{turnAt: told}
	}
	return m, held{}
}

// pacerAt is the earliest time from t at which the pacer fits need units
// at once, from the pace record as it is (0 when it cannot be read): for
// the Retry-After of a request its paced share refused, which did not
// reach the pacer.
func (r *view) pacerAt(t, need int64) int64 {
	raw, _, err := r.store.Get(r.paceKey)
	if err != nil {
		return 0
	}
	v, err := decodePace(raw)
	if err != nil {
		return 0
	}
	return t + paceWait(v.tat, t, need, paceParams(r.cfg))
}
