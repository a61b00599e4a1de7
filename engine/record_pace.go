package engine

// The pace record (recordKey "pace", with Config.Pace): the theoretical
// arrival time of the limit's cell rate algorithm (rules.go holds the
// arithmetic). Written by paced only.

import "encoding/binary"

const paceVersion = 2

func appendPace(dst []byte, tat int64) []byte {
	return seal(binary.LittleEndian.AppendUint64(append(dst[:0], paceVersion), uint64(tat)))
}

func decodePace(b []byte) (int64, error) {
	if len(b) != 9+sealLen || b[0] != paceVersion {
		return 0, errCorrupt
	}
	b, err := unseal(b)
	if err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[1:])), nil
}

// paced passes got units just taken from the window budget through the
// pacing key: it returns how many pacing lets through (the caller gives the
// rest back to the budget). When pacing holds units back, it says so, and
// when the next one fits, for the client's Retry-After. An unreadable
// pace key is rewritten from now: pacing is a smoothing bound, and the
// window budget still holds.
func (r *view) paced(got, t int64) (int64, held) {
	if !r.cfg.Pace || got <= 0 {
		return got, held{}
	}
	key := r.paceKey
	pp := paceParams(r.cfg)
	var m, next int64
	err := r.update(key, "pace", nil, func(st stored) ([]byte, error) {
		raw, missing := st.raw, st.missing
		var tat int64
		if !missing {
			var err error
			if tat, err = decodePace(raw); err != nil {
				r.obs.ValueReset(key, err)
				tat = 0
			} else if tat-t > int64(r.cfg.Cycle)+pp.tolerance {
				// No unit is paced more than a cycle past its tolerance: this
				// pace was set by a clock that read far ahead. Kept, it would
				// admit nothing until the clock got there.
				r.obs.ValueReset(key, errCorrupt)
				tat = 0
			}
		}
		m, next = paceFit(tat, t, got, pp)
		if m == 0 {
			return nil, nil
		}
		r.buf = appendPace(r.buf, next)
		return r.buf, nil
	})
	if err != nil {
		m = 0
	}
	if m < got {
		return m, held{clipped: true, paceAt: t + max(pp.interval, paceWait(next, t, pp.tolerance))}
	}
	return m, held{}
}
