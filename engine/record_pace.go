package engine

// The pace record (recordKey "pace", with Config.Pace): the theoretical
// arrival time of the limit's cell rate algorithm and its bookings
// (rules.go holds the arithmetic: paceTake). Written by paced only.

import "encoding/binary"

const (
	paceVersion = 3
	paceHead    = 1 + 8 + 1     // version, tat, bookings
	bookingLen  = 4 + 4 + 8 + 8 // client, n, slot, at
)

func appendPace(dst []byte, st *paceState) []byte {
	dst = binary.LittleEndian.AppendUint64(append(dst[:0], paceVersion), uint64(st.tat))
	dst = append(dst, byte(len(st.booked)))
	for _, b := range st.booked {
		dst = binary.LittleEndian.AppendUint32(dst, b.client)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(b.n))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(b.slot))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(b.at))
	}
	return seal(dst)
}

// decodePace decodes b into st, reusing st.booked's array.
func decodePace(b []byte, st *paceState) error {
	if len(b) < paceHead+sealLen || b[0] != paceVersion {
		return errCorrupt
	}
	n := int(b[9])
	if n > maxBookings || len(b) != paceHead+n*bookingLen+sealLen {
		return errCorrupt
	}
	b, err := unseal(b)
	if err != nil {
		return err
	}
	st.tat = int64(binary.LittleEndian.Uint64(b[1:]))
	st.booked = st.booked[:0]
	for i := 0; i < n; i++ {
		e := b[paceHead+i*bookingLen:]
		bk := booking{client: binary.LittleEndian.Uint32(e), n: int64(binary.LittleEndian.Uint32(e[4:])),
			slot: int64(binary.LittleEndian.Uint64(e[8:])), at: int64(binary.LittleEndian.Uint64(e[16:]))}
		st.booked = append(st.booked, bk)
	}
	return nil
}

// paced passes got units, just taken from the window budget for the client
// with hash client, through the pacing key: it returns how many pacing lets
// through (the caller gives the rest back to the budget). When pacing holds
// units back, it says so, and when they fit, booked for the client when
// they can be (paceTake), for its Retry-After.
func (r *view) paced(got, t int64, client uint64, again bool) (int64, held) {
	if !r.cfg.Pace || got <= 0 {
		return got, held{}
	}
	m, at, booked := r.pace(client, t, got, t, again)
	if m < got {
		return m, held{clipped: true, paced: true, booked: booked, paceAt: max(at, t+1)}
	}
	return m, held{}
}

// book books n units of the pacer for the client with hash client, refused
// at t, for when it may next take units for another reason (notBefore >
// t), and returns when they fit, and whether they are booked (at 0:
// pacing is off, or the pace key could not be read).
func (r *view) book(n, t, notBefore int64, client uint64) (at int64, booked bool) {
	if !r.cfg.Pace || n <= 0 || notBefore <= t {
		return 0, false
	}
	_, at, booked = r.pace(client, t, n, notBefore, false)
	return at, booked
}

// pace is the pace key's one read-modify-write (paceTake). An unreadable
// pace key is rewritten from now: pacing is a smoothing bound, and the
// window budget still holds.
func (r *view) pace(client uint64, t, n, notBefore int64, again bool) (m, at int64, booked bool) {
	key := r.paceKey
	pp := paceParams(r.cfg)
	st := &r.paceSt
	err := r.update(key, "pace", nil, func(sv stored) ([]byte, error) {
		st.tat, st.booked = 0, st.booked[:0]
		if !sv.missing {
			if err := decodePace(sv.raw, st); err != nil {
				r.obs.ValueReset(key, err)
				st.tat, st.booked = 0, st.booked[:0]
			} else if st.tat > t+int64(r.cfg.Cycle)+int64(r.cfg.MinCycle)+pp.tolerance {
				// No unit is paced more than a cycle and a min_cycle past
				// its tolerance: this pace was set by a clock that read far
				// ahead. Kept, it would admit nothing until the clock got
				// there.
				r.obs.ValueReset(key, errCorrupt)
				st.tat, st.booked = 0, st.booked[:0]
			} else if dropImplausible(st, t, r.cfg, pp) {
				r.obs.ValueReset(key, errCorrupt)
			}
		}
		var changed bool
		m, at, booked, changed = paceTake(st, bookingClient(client), t, n, notBefore, again, pp)
		if !changed {
			return nil, nil
		}
		r.buf = appendPace(r.buf, st)
		return r.buf, nil
	})
	if err != nil {
		return 0, 0, false
	}
	return m, at, booked
}

// dropImplausible drops the bookings of st that no worker whose clock reads
// near t could have made (paceTake books no further than pp.horizon ahead,
// nor more units than the pacer passes at once), and reports whether there
// were any.
func dropImplausible(st *paceState, t int64, cfg *Config, pp paceParam) bool {
	most := t + pp.horizon + int64(cfg.MinCycle) + pp.tolerance + pp.interval
	kept := st.booked[:0]
	for _, b := range st.booked {
		if b.n <= pp.most() && b.slot <= most-b.n*pp.interval && b.at <= most {
			kept = append(kept, b)
		}
	}
	dropped := len(kept) < len(st.booked)
	st.booked = kept
	return dropped
}
