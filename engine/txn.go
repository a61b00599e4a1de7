package engine

import "errors"

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
func (r *registry) update(key, op string, read *bucketRead, change func(st stored) ([]byte, error)) error {
	return casUpdate(r.store, r.obs, r.cfg.CASRetries, key, op, read, change)
}

// casUpdate is update over any store (the fleet record's owner has no
// registry).
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
		missing := errors.Is(err, ErrNotFound)
		if err != nil && !missing {
			obs.StoreFailure("get "+op, err)
			return err
		}
		if missing {
			raw, cas = nil, casCreate
		}
		out, err := change(stored{raw: raw, cas: cas, missing: missing})
		if err != nil || out == nil {
			return err
		}
		switch err := store.Set(key, out, cas); {
		case errors.Is(err, ErrCASMismatch):
			obs.CASRetry()
			continue
		case err != nil:
			obs.StoreFailure("set "+op, err)
			return err
		}
		return nil
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
