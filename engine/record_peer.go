package engine

// The peer records (recordKey "ids/<B>/<i>", with Config.MaxIDsPerPeer): for
// each peer the caller names (a source address, an mTLS principal), the
// distinct client ids it used in the newest window, at most MaxIDsPerPeer
// of them. Written by allowID only.

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// MaxIDsPerPeerCap bounds Config.MaxIDsPerPeer: a peer entry holds its ids.
const MaxIDsPerPeerCap = 16

const (
	peerVersion = 1
	peerSlots   = 32 // peers per bucket
	peerHead    = 1 + 1
	peerFixed   = 8 + 8 + 1 // peer hash, window, id count
)

// peerEntry is one peer's ids in one window.
type peerEntry struct {
	peer   uint64
	window int64
	ids    []uint64
}

func appendPeers(dst []byte, es []peerEntry) []byte {
	le := binary.LittleEndian
	dst = append(dst[:0], peerVersion, byte(len(es)))
	for i := range es {
		e := &es[i]
		dst = le.AppendUint64(dst, e.peer)
		dst = le.AppendUint64(dst, uint64(e.window))
		dst = append(dst, byte(len(e.ids)))
		for _, id := range e.ids {
			dst = le.AppendUint64(dst, id)
		}
	}
	return seal(dst)
}

// decodePeers fills es from raw, reusing its slices.
func decodePeers(raw []byte, es []peerEntry) ([]peerEntry, error) {
	b, err := unseal(raw)
	if err != nil {
		return es[:0], err
	}
	if len(b) < peerHead || b[0] != peerVersion || int(b[1]) > peerSlots {
		return es[:0], fmt.Errorf("%w: peer bucket of %d bytes", errCorrupt, len(raw))
	}
	le := binary.LittleEndian
	n, p := int(b[1]), b[peerHead:]
	es = es[:0]
	for i := 0; i < n; i++ {
		if len(p) < peerFixed {
			return es[:0], fmt.Errorf("%w: peer bucket truncated", errCorrupt)
		}
		e := peerEntry{peer: le.Uint64(p), window: int64(le.Uint64(p[8:]))}
		k := int(p[16])
		p = p[peerFixed:]
		if k > MaxIDsPerPeerCap || len(p) < 8*k || e.window < minWindow || e.window > maxWindow {
			return es[:0], fmt.Errorf("%w: impossible peer entry", errCorrupt)
		}
		if len(es) < cap(es) {
			e.ids = es[:len(es)+1][len(es)].ids[:0]
		}
		for j := 0; j < k; j++ {
			e.ids = append(e.ids, le.Uint64(p[8*j:]))
		}
		p = p[8*k:]
		es = append(es, e)
	}
	if len(p) != 0 {
		return es[:0], fmt.Errorf("%w: peer bucket of %d bytes", errCorrupt, len(raw))
	}
	return es, nil
}

// peerTable is where a limit keeps its peer records: as many buckets as
// its client table, under keys of their own.
type peerTable struct {
	nb      int
	prefix  string
	keys    []string
	entries []peerEntry // decoding scratch
	buf     []byte
}

func newPeerTable(cfg *Config, nb int) *peerTable {
	return &peerTable{nb: nb, prefix: recordKey(cfg, "ids/"+strconv.Itoa(nb)+"/"), keys: make([]string, nb)}
}

func (pt *peerTable) key(b int) string {
	if pt.keys[b] == "" {
		pt.keys[b] = pt.prefix + strconv.Itoa(b)
	}
	return pt.keys[b]
}

// peerVerdict is what allowID found.
type peerVerdict uint8

const (
	peerAllowed   peerVerdict = iota // the id is one of the peer's, or took a free place
	peerFull                         // the peer used its max ids in the window: refused
	peerUntracked                    // no room for the peer in its bucket: not bounded
)

// allowID is the one read-modify-write of a peer bucket: it records that
// peer used client id h in window k, if the peer has used fewer than max
// ids in k (or used h already). It returns the verdict and the peer's ids
// as recorded, for the worker's cache. Entries of earlier windows are
// free. A peer that finds its bucket full of this window's peers is not
// bounded (the client table still is): a flood of peers costs the bound,
// never an honest client.
func (r *view) allowID(pt *peerTable, k int64, peer, h uint64, max int) (peerVerdict, []uint64, error) {
	b := int((peer ^ peer>>31) & uint64(pt.nb-1))
	key := pt.key(b)
	var verdict peerVerdict
	var ids []uint64
	err := r.update(key, "peers", nil, func(st stored) ([]byte, error) {
		es := pt.entries[:0]
		if !st.missing {
			var err error
			if es, err = decodePeers(st.raw, pt.entries); err != nil {
				r.obs.ValueReset(key, err)
				es = es[:0] // an unreadable bucket is started afresh: it only bounds
			}
		}
		pt.entries = es
		at, free := -1, -1
		for i := range es {
			switch {
			case es[i].peer == peer:
				at = i
			case free < 0 && es[i].window < k:
				free = i
			}
		}
		switch {
		case at >= 0 && es[at].window != k:
			es[at].window, es[at].ids = k, es[at].ids[:0]
		case at < 0 && free >= 0:
			at = free
			es[at] = peerEntry{peer: peer, window: k, ids: es[at].ids[:0]}
		case at < 0 && len(es) < peerSlots:
			es = append(es, peerEntry{peer: peer, window: k})
			at = len(es) - 1
		case at < 0:
			verdict, ids = peerUntracked, nil
			return nil, nil
		}
		e := &es[at]
		ids = e.ids
		for _, id := range e.ids {
			if id == h {
				verdict = peerAllowed
				return nil, nil
			}
		}
		if len(e.ids) >= max {
			verdict = peerFull
			return nil, nil
		}
		e.ids = append(e.ids, h)
		ids, verdict = e.ids, peerAllowed
		pt.entries = es
		pt.buf = appendPeers(pt.buf, es)
		return pt.buf, nil
	})
	return verdict, append([]uint64(nil), ids...), err
}
