package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Shared values are compact, versioned, fixed-layout little-endian records:
// decoding is a bounds check and a few loads, with no JSON and no reflection.
// A value that fails to decode is reset by the reader (CAS-guarded, logged
// through the Observer), so corruption costs at most that key's counts.

const (
	headerVersion = 2 // 2: idle time in 1/1024 cycle, uint32
	slotVersion   = 1

	headerFixedLen = 1 + 8 + 8 + 8 + 8 + 1 + 2 + 2
	clientEntryLen = 8 + 8 + 4
	pendingLen     = 8
	slotLen        = 1 + 8 + 8 + 8 + 8
)

var errCorrupt = errors.New("corrupt value")

// maxCycleID bounds cycle ids far below wrap-around, even after header
// resets (each adds resetCycleJump).
const maxCycleID = 1 << 62

// header is the cycle state shared by every worker: which cycle is running,
// when it ends, the registered clients with their shares, and newcomers
// waiting for an early rollover. Clients sit at fixed slot positions (hash 0
// marks a free slot) because a slot's index also names its counter key.
type header struct {
	fingerprint uint64
	cycle       uint64
	start       int64 // Unix nanoseconds
	deadline    int64
	early       bool // the cycle began with an early rollover
	clients     []clientEntry
	pending     []uint64
}

type clientEntry struct {
	hash  uint64
	share int64
	idle  uint32 // time without demand, in 1/idleUnits of a cycle
}

func (h *header) slotOf(hash uint64) int {
	for i, c := range h.clients {
		if c.hash == hash {
			return i
		}
	}
	return -1
}

func appendHeader(dst []byte, h *header) []byte {
	dst = append(dst[:0], headerVersion)
	dst = binary.LittleEndian.AppendUint64(dst, h.fingerprint)
	dst = binary.LittleEndian.AppendUint64(dst, h.cycle)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.start))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.deadline))
	var flags byte
	if h.early {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(h.clients)))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(h.pending)))
	for _, c := range h.clients {
		dst = binary.LittleEndian.AppendUint64(dst, c.hash)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(c.share))
		dst = binary.LittleEndian.AppendUint32(dst, c.idle)
	}
	for _, p := range h.pending {
		dst = binary.LittleEndian.AppendUint64(dst, p)
	}
	return dst
}

// decodeHeader fills h from b, reusing h's slices.
func decodeHeader(b []byte, h *header) error {
	if len(b) < headerFixedLen {
		return fmt.Errorf("%w: header of %d bytes", errCorrupt, len(b))
	}
	if b[0] != headerVersion {
		return fmt.Errorf("%w: header version %d", errCorrupt, b[0])
	}
	le := binary.LittleEndian
	nClients := int(le.Uint16(b[34:]))
	nPending := int(le.Uint16(b[36:]))
	if len(b) != headerFixedLen+nClients*clientEntryLen+nPending*pendingLen {
		return fmt.Errorf("%w: header length %d for %d clients, %d pending", errCorrupt, len(b), nClients, nPending)
	}
	h.fingerprint = le.Uint64(b[1:])
	h.cycle = le.Uint64(b[9:])
	h.start = int64(le.Uint64(b[17:]))
	h.deadline = int64(le.Uint64(b[25:]))
	// A value can decode and still be impossible (a bad writer): such a
	// header could stay "not due" for ever or wrap the cycle id. Treat it
	// as unreadable, so it is reset.
	if h.cycle >= maxCycleID || h.deadline < h.start || h.deadline-h.start > int64(MaxCycle) {
		return fmt.Errorf("%w: cycle %d from %d to %d", errCorrupt, h.cycle, h.start, h.deadline)
	}
	h.early = b[33]&1 != 0
	h.clients = h.clients[:0]
	p := b[headerFixedLen:]
	for i := 0; i < nClients; i++ {
		c := clientEntry{hash: le.Uint64(p), share: int64(le.Uint64(p[8:])), idle: le.Uint32(p[16:])}
		if c.share < 0 || c.share > MaxCapacity {
			return fmt.Errorf("%w: share %d", errCorrupt, c.share)
		}
		h.clients = append(h.clients, c)
		p = p[clientEntryLen:]
	}
	h.pending = h.pending[:0]
	for i := 0; i < nPending; i++ {
		h.pending = append(h.pending, le.Uint64(p))
		p = p[pendingLen:]
	}
	return nil
}

// slotValue is one client's counters for one cycle, summed over workers.
// granted counts units leased to workers (admissions, or admissions to be);
// demand counts attempts, rejected ones included.
type slotValue struct {
	cycle   uint64
	hash    uint64
	granted int64
	demand  int64
}

func appendSlot(dst []byte, v slotValue) []byte {
	dst = append(dst[:0], slotVersion)
	dst = binary.LittleEndian.AppendUint64(dst, v.cycle)
	dst = binary.LittleEndian.AppendUint64(dst, v.hash)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(v.granted))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(v.demand))
	return dst
}

func decodeSlot(b []byte) (slotValue, error) {
	if len(b) != slotLen || b[0] != slotVersion {
		return slotValue{}, fmt.Errorf("%w: slot of %d bytes", errCorrupt, len(b))
	}
	le := binary.LittleEndian
	v := slotValue{
		cycle:   le.Uint64(b[1:]),
		hash:    le.Uint64(b[9:]),
		granted: int64(le.Uint64(b[17:])),
		demand:  int64(le.Uint64(b[25:])),
	}
	if v.granted < 0 || v.demand < 0 || v.cycle >= maxCycleID {
		return slotValue{}, fmt.Errorf("%w: impossible slot", errCorrupt)
	}
	return v, nil
}
