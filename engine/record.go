package engine

// Shared records: every value the engine keeps in the store is a record
// owned by one file (record_plan.go, record_budget.go, record_bucket.go,
// record_pace.go, record_peer.go, and fleet.go, where the fleet record
// lives with the calls that use it) that holds its type, its encoding, its
// key and its only read-modify-write. This file holds what they share: the
// one compare-and-swap loop (update), the checksum every value ends with
// (seal), and the bounds that keep decoded values from overflowing.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// recordFormat names the records' encoding in every key of the store
// (<prefix>/<format>/<record>). A module that encodes any record otherwise
// keeps its state under other keys: while two such modules serve side by
// side (the old one drains after an upgrade), neither reads the other's
// values as unreadable ones and resets them, which would refuse most
// requests until the old one is gone. Each counts its own capacity then,
// as a limit given a new name does. Change it with any record's encoding.
const recordFormat = "r12"

// recordKey is the store key of record name (p, w, pace, f, c/<B>/<i>,
// ids/<B>/<i>) under cfg.
func recordKey(cfg *Config, name string) string {
	return cfg.KeyPrefix + "/" + recordFormat + "/" + name
}

// update is the engine's one compare-and-swap loop: every read-modify-write
// of a shared record goes through it. It reads key (or takes read, a read
// of it made just before, on the first attempt), hands the value to change,
// and writes what change returns under the CAS it read. When another
// worker wrote first it reads again and calls change again, so change must
// derive everything it decides from the value it is given.
//
// change sees the value as stored (missing when the key was never set); it
// returns the bytes to write, or nil to write nothing (the transaction is
// then over, as it is when change returns an error, which update returns).
//
// Retries are bounded by Config.CASRetries. Each lost race means another
// worker's write succeeded, so the engine as a whole always progresses;
// retries that run out return ErrRetriesExhausted, which never admits (see
// ReasonContended). A store error is reported to the Observer as op and
// returned.
func (r *view) update(key, op string, read *bucketRead, change func(st stored) ([]byte, error)) error {
	return casUpdate(r.store, r.obs, r.cfg.CASRetries, key, op, read, change)
}

// casUpdate is update over a store and an observer given: the fleet
// record's owner reports its own failures, once per episode.
func casUpdate(store Store, obs Observer, retries int, key, op string, read *bucketRead, change func(st stored) ([]byte, error)) error {
	for attempt := 0; attempt < retries; attempt++ {
		var raw []byte
		var cas uint32
		var err error
		if read != nil && attempt == 0 {
			raw, cas = read.raw, read.cas
			if read.missing {
				err = ErrNotFound
			}
		} else {
			raw, cas, err = store.Get(key)
		}
		missing := err != nil && errors.Is(err, ErrNotFound)
		if err != nil && !missing {
			obs.StoreFailure("get "+op, err)
			return err
		}
		if missing {
			raw, cas = nil, casCreate
		}
		out, err := change(stored{raw: raw, cas: cas, missing: missing})
		if errors.Is(err, errReread) {
			obs.CASRetry()
			continue
		}
		if err != nil || out == nil {
			return err
		}
		switch err := store.Set(key, out, cas); {
		case err == nil:
			return nil
		case errors.Is(err, ErrCASMismatch):
			obs.CASRetry()
			continue
		case err != nil:
			obs.StoreFailure("set "+op, err)
			return err
		}
	}
	obs.StoreFailure(op, ErrRetriesExhausted)
	return ErrRetriesExhausted
}

// stored is a value as update read it.
type stored struct {
	raw     []byte // nil when missing
	cas     uint32 // casCreate when missing
	missing bool
}

// Every record ends with a checksum of the bytes before it (seal). Range
// checks catch values no writer produces; the checksum catches the ones
// that look possible: one flipped bit in a budget's granted would otherwise
// decode as a smaller count and re-open units the window already granted.
const sealLen = 8

// seal appends dst's checksum to it.
func seal(dst []byte) []byte { return binary.LittleEndian.AppendUint64(dst, checksum(dst)) }

// unseal checks raw's trailing checksum and returns the record before it.
func unseal(raw []byte) ([]byte, error) {
	n := len(raw) - sealLen
	if n < 1 || binary.LittleEndian.Uint64(raw[n:]) != checksum(raw[:n]) {
		return nil, fmt.Errorf("%w: checksum of a %d-byte value", errCorrupt, len(raw))
	}
	return raw[:n], nil
}

// checksum mixes b a word at a time, in four lanes that run side by side
// (word i goes to lane i mod 4), then the tail bytes into the first, and
// finally the other lanes into the first as three more words. Every step
// is a bijection of the state for a fixed word, and of the word for a
// fixed state, so a change confined to one word (a flipped bit, in
// particular) changes its lane's state, and through the final steps the
// result. The lanes keep the multiplies independent: about 70 ns a
// kilobyte, a few nanoseconds for a small record.
func checksum(b []byte) uint64 {
	seed := uint64(len(b)) ^ 0x9e3779b97f4a7c15
	h0, h1, h2, h3 := seed, seed+1, seed+2, seed+3
	le := binary.LittleEndian
	for ; len(b) >= 32; b = b[32:] {
		h0 = mixWord(h0, le.Uint64(b))
		h1 = mixWord(h1, le.Uint64(b[8:]))
		h2 = mixWord(h2, le.Uint64(b[16:]))
		h3 = mixWord(h3, le.Uint64(b[24:]))
	}
	for ; len(b) >= 8; b = b[8:] {
		h0 = mixWord(h0, le.Uint64(b))
	}
	for _, c := range b {
		h0 = mixWord(h0, uint64(c)|0x100) // (a byte is not a word: no tail collides with one)
	}
	return mixWord(mixWord(mixWord(h0, h1), h2), h3)
}

// mixWord is checksum's step: a bijection of h for a fixed w, and of w for a
// fixed h.
func mixWord(h, w uint64) uint64 {
	h = (h ^ w) * 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

// Shared values are compact, versioned, fixed-layout little-endian records:
// decoding is a bounds check and a few loads, with no JSON and no
// reflection. A value that decodes but cannot be right (a negative count, a
// plan id near wrap-around, a NaN parameter) is rejected like a truncated
// one: nothing read from the store is trusted before it passed its decoder.

// maxPlanID bounds plan ids far below wrap-around, even after plan resets
// (each adds planResetJump).
const maxPlanID = 1 << 62

// maxBuckets bounds the bucket count a plan may name.
const maxBuckets = 1 << 20

// Window indices stay far from overflow of k·cycle in nanoseconds.
const (
	minWindow = -(1 << 53)
	maxWindow = 1 << 53
)

// maxShift bounds a plan's clock shift: about 146 years of jumps.
const maxShift = 1 << 62
