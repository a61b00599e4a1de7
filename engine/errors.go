package engine

import (
	"errors"
	"fmt"
)

// FieldError names the configuration field that is wrong and why. Its text is
// what an operator sees in Envoy's log, so it leads with the field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// fieldErr is a FieldError for field, its reason formatted.
func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrRetriesExhausted is reported to the Observer when an operation kept
// losing CAS races.
var ErrRetriesExhausted = errors.New("cas retries exhausted")

// errStore stands for a store error that was already reported to the
// Observer where it happened.
var errStore = errors.New("store failed")

// errCorrupt: a shared value that cannot be read (its checksum, its
// version, its length or a field's range is wrong). Only a roller may
// replace it (view.resetCorrupt).
var errCorrupt = errors.New("corrupt value")

// errReread: what a transaction read changed under it in a way its CAS
// cannot tell (another key moved between two reads): it starts again, as
// after a CAS mismatch.
var errReread = errors.New("read again")

// errStale: the budget belongs to a newer plan's window than the view, or
// a newer plan than the view's moved what the clients are owed.
var errStale = errors.New("view older than the budget")

// errFull: the newcomer cannot be registered (table or probe path full).
var errFull = errors.New("client table full")

// errFullForNow: the table looks full under a provisional plan, whose
// count is an upper bound until the plan read in slices replaces it.
var errFullForNow = errors.New("client table full as far as a provisional plan counts")
