package engine

// The plan record (recordKey "p"): the running window, who is counted in it,
// and what any worker needs to derive one client's share. Written by
// updatePlan only: a new plan (view.replan), a proven newcomer counted
// as pending (countPending), a newer config's claim (claim).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// planVersion and planLen: the plan's encoding.
const (
	planVersion = 4
	planLen     = 1 + 8*7 + 4*3 + 1 + 8*5 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8*3 + 8 + 8 + sealLen
)

// plan is the small record every worker reads to know the running window
// and how to derive any client's share in it. Its size does not depend on
// the number of clients.
type plan struct {
	id       uint64 // strictly increasing, never reused: the share period
	roll     uint64 // id of the plan that opened this window
	window   int64  // aligned window index, in units of cycle
	cycle    int64  // window length and offset of the config that planned it:
	offset   int64  // the window ends when that config says, whoever reads it
	at       int64  // when it was published (Unix ns)
	capacity int64  // capacity the shares were computed for
	n        uint32 // clients counted in the plan
	pending  uint32 // proven or declared clients waiting for the next plan (unproven ones are not counted)
	promoted uint64 // hash of the unproven newcomer this plan counts (0: none), see registered
	buckets  uint32 // view size the plan was computed over
	replan   bool   // published mid-window, for newcomers
	// provisional: published without reading the table, with the
	// parameters of the plan before it (see provisional); a tick replaces
	// it with a plan computed over every client.
	provisional bool
	// carried: provisional with the parameters of the window before the
	// last (a roll's, or a re-plan's of such a plan): no roll carries them
	// further (see provisional).
	carried bool
	params  policyParams
	// Largest remainder as a threshold: a client's cap rounds up when
	// (fractional part, arrival, hash) is at or before (thrFrac, thrSince,
	// thrHash) in the rounding order (see roundsUp).
	thrFrac  float64
	thrSince int64
	thrHash  uint64
	// scale turns what each client still wants of its full-window share
	// into what it may take of the window's remaining budget (≤ 1).
	scale float64
	// spread (≥ 1) multiplies every client's cap, up to its own cap
	// (Config.MaxShare, Config.Caps): it shares what the caps keep from
	// capped clients among the others (see spreadCaps). 1 without caps.
	spread float64
	// print is the fingerprint of the settings the parameters were
	// computed under besides the capacity (sharePrint): a provisional plan
	// carries them only under the same.
	print uint64
	// shift is added to every worker's clock reading (Unix ns, a whole
	// number of cycles, never negative, only ever growing): after a clock
	// jump the store's windows run ahead of the clock, and a shift moves
	// the clock onto a window that was never opened (see transition).
	shift int64
	// born is when the newest config that served this limit first read
	// the clock (Unix ns), and newCycle, newOffset and newBuckets are that
	// config's windows and client table: during a reconfiguration every
	// config opens new windows the newest one's way (see view.replan).
	born       int64
	newCycle   int64
	newOffset  int64
	newBuckets int64
}

func appendPlan(dst []byte, p *plan) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], planVersion)
	dst = le.AppendUint64(dst, p.id)
	dst = le.AppendUint64(dst, p.roll)
	dst = le.AppendUint64(dst, uint64(p.window))
	dst = le.AppendUint64(dst, uint64(p.at))
	dst = le.AppendUint64(dst, uint64(p.capacity))
	dst = le.AppendUint64(dst, math.Float64bits(p.thrFrac))
	dst = le.AppendUint64(dst, p.thrHash)
	dst = le.AppendUint32(dst, p.n)
	dst = le.AppendUint32(dst, p.pending)
	dst = le.AppendUint32(dst, p.buckets)
	var flags byte
	if p.replan {
		flags = 1
	}
	if p.provisional {
		flags |= 2
	}
	if p.carried {
		flags |= 4
	}
	dst = append(dst, flags)
	for _, f := range p.params {
		dst = le.AppendUint64(dst, math.Float64bits(f))
	}
	dst = le.AppendUint64(dst, math.Float64bits(p.scale))
	dst = le.AppendUint64(dst, uint64(p.thrSince))
	dst = le.AppendUint64(dst, uint64(p.cycle))
	dst = le.AppendUint64(dst, uint64(p.offset))
	dst = le.AppendUint64(dst, p.promoted)
	dst = le.AppendUint64(dst, uint64(p.shift))
	dst = le.AppendUint64(dst, uint64(p.born))
	dst = le.AppendUint64(dst, uint64(p.newCycle))
	dst = le.AppendUint64(dst, uint64(p.newOffset))
	dst = le.AppendUint64(dst, uint64(p.newBuckets))
	dst = le.AppendUint64(dst, math.Float64bits(p.spread))
	dst = le.AppendUint64(dst, p.print)
	return seal(dst)
}

func decodePlan(b []byte, p *plan) error {
	if len(b) != planLen || b[0] != planVersion {
		return fmt.Errorf("%w: plan of %d bytes", errCorrupt, len(b))
	}
	b, err := unseal(b)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	var q plan
	q.id = le.Uint64(b[1:])
	q.roll = le.Uint64(b[9:])
	q.window = int64(le.Uint64(b[17:]))
	q.at = int64(le.Uint64(b[25:]))
	q.capacity = int64(le.Uint64(b[33:]))
	q.thrFrac = math.Float64frombits(le.Uint64(b[41:]))
	q.thrHash = le.Uint64(b[49:])
	q.n = le.Uint32(b[57:])
	q.pending = le.Uint32(b[61:])
	q.buckets = le.Uint32(b[65:])
	q.replan = b[69]&1 != 0
	q.provisional = b[69]&2 != 0
	q.carried = b[69]&4 != 0
	off := 70
	for i := range q.params {
		q.params[i] = math.Float64frombits(le.Uint64(b[off:]))
		off += 8
	}
	q.scale = math.Float64frombits(le.Uint64(b[off:]))
	q.thrSince = int64(le.Uint64(b[off+8:]))
	q.cycle = int64(le.Uint64(b[off+16:]))
	q.offset = int64(le.Uint64(b[off+24:]))
	q.promoted = le.Uint64(b[off+32:])
	q.shift = int64(le.Uint64(b[off+40:]))
	q.born = int64(le.Uint64(b[off+48:]))
	q.newCycle = int64(le.Uint64(b[off+56:]))
	q.newOffset = int64(le.Uint64(b[off+64:]))
	q.newBuckets = int64(le.Uint64(b[off+72:]))
	q.spread = math.Float64frombits(le.Uint64(b[off+80:]))
	q.print = le.Uint64(b[off+88:])
	switch {
	case b[69]&^7 != 0 || q.carried && !q.provisional:
		return fmt.Errorf("%w: plan flags %#x", errCorrupt, b[69])
	case q.id == 0 || q.id >= maxPlanID || q.roll == 0 || q.roll > q.id:
		return fmt.Errorf("%w: plan id %d, roll %d", errCorrupt, q.id, q.roll)
	case q.capacity < 1 || q.capacity > MaxCapacity:
		return fmt.Errorf("%w: plan capacity %d", errCorrupt, q.capacity)
	case q.n > 2*MaxClientsCap || q.pending > 2*MaxClientsCap:
		return fmt.Errorf("%w: plan counts %d+%d", errCorrupt, q.n, q.pending)
	case q.buckets == 0 || q.buckets > maxBuckets || q.buckets&(q.buckets-1) != 0:
		return fmt.Errorf("%w: plan buckets %d", errCorrupt, q.buckets)
	case !(q.scale >= 0 && q.scale <= 1) || !(q.thrFrac >= -1 && q.thrFrac <= 2) || !(q.spread >= 1 && q.spread <= maxSpread):
		return fmt.Errorf("%w: plan scale %v, threshold %v, spread %v", errCorrupt, q.scale, q.thrFrac, q.spread)
	case q.cycle <= 0 || q.cycle > int64(MaxCycle) || q.offset < 0 || q.offset >= q.cycle:
		return fmt.Errorf("%w: plan cycle %d, offset %d", errCorrupt, q.cycle, q.offset)
	case q.window < minWindow || q.window > maxWindow || q.window > math.MaxInt64/q.cycle-2 || q.window < math.MinInt64/q.cycle+2:
		return fmt.Errorf("%w: plan window %d", errCorrupt, q.window)
	case q.shift < 0 || q.shift > maxShift:
		return fmt.Errorf("%w: plan shift %d", errCorrupt, q.shift)
	case q.newCycle < 0 || q.newCycle > int64(MaxCycle) || q.newOffset < 0 || (q.newCycle > 0 && q.newOffset >= q.newCycle) ||
		q.newBuckets < 0 || q.newBuckets > maxBuckets || q.newBuckets&(q.newBuckets-1) != 0:
		return fmt.Errorf("%w: plan's newest config %d, %d, %d", errCorrupt, q.newCycle, q.newOffset, q.newBuckets)
	}
	for _, f := range q.params {
		if !(f >= 0 && f <= 4*MaxCapacity*float64(2*MaxClientsCap)) {
			return fmt.Errorf("%w: plan parameter %v", errCorrupt, f)
		}
	}
	*p = q
	return nil
}

// readPlan reads the plan key (missing when it was never written).
func (r *view) readPlan() (stored, error) {
	raw, cas, err := r.store.Get(r.planKey)
	missing := errors.Is(err, ErrNotFound)
	if err != nil && !missing {
		r.obs.StoreFailure("get plan", err)
		return stored{}, err
	}
	return stored{raw: raw, cas: cas, missing: missing}, nil
}

// updatePlan is the one read-modify-write of the plan: change is handed
// the plan key as read and returns the plan to publish, or nil to publish
// nothing. It returns the plan published (nil: none). A lost race reads
// the plan again and calls change again.
func (r *view) updatePlan(change func(st stored) (*plan, error)) (*plan, error) {
	var next *plan
	err := r.update(r.planKey, "plan", nil, func(st stored) ([]byte, error) {
		n, err := change(st)
		if err != nil || n == nil {
			next = nil
			return nil, err
		}
		next = n
		r.buf = appendPlan(r.buf, n)
		return r.buf, nil
	})
	if err != nil {
		return nil, err
	}
	return next, nil
}
