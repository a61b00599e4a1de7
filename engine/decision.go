package engine

import "time"

// Reason says why a request was admitted or not. Its String form is stable:
// the plugin uses it in metric names and response bodies.
type Reason uint8

const (
	// ReasonOK: admitted within the client's share.
	ReasonOK Reason = iota
	// ReasonOverLimit: the client used what it may take now (its share, or
	// under Fair and pacing what has accrued of it), or the window's
	// capacity is spent.
	ReasonOverLimit
	// ReasonAnonymous: the request carried no usable client id.
	ReasonAnonymous
	// ReasonTableFull: a newcomer found the client table full.
	ReasonTableFull
	// ReasonPending: a newcomer waits for the re-plan that counts it, which
	// MinCycle holds back, or for the next window when the running one's
	// capacity was spent when it arrived.
	ReasonPending
	// ReasonStoreFailure: the store returned an error; FailureModeDeny
	// decides whether this admits, and a worker admits at most a small
	// allowance per window this way (see Limiter.AdmitNAt).
	ReasonStoreFailure
	// ReasonContended: compare-and-swap kept losing races past the retry
	// bound. Nothing was granted, so the request is refused, whatever
	// FailureModeDeny says; a retry shortly after may succeed.
	ReasonContended
	// ReasonAmbiguousID: the request named its client more than once (a
	// client id header sent twice); it is refused rather than limited
	// under a copy picked silently. The plugin decides it, before the
	// engine.
	ReasonAmbiguousID
	// ReasonTooManyIDs: the request's peer (Limiter.AdmitFromAt) already
	// used Config.MaxIDsPerPeer other client ids in the window.
	ReasonTooManyIDs
	numReasons
)

var reasonNames = [numReasons]string{"ok", "over_limit", "anonymous", "table_full", "pending", "store_failure", "contended", "ambiguous_id", "too_many_ids"}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons lists every reason, for callers that pre-define one metric each.
func Reasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// Decision is the outcome of one admission, with what a response needs.
type Decision struct {
	// Allowed is whether the request may proceed. In passthrough mode it is
	// always true.
	Allowed bool
	// WouldReject is what enforce mode does with this request: in enforce
	// mode it is !Allowed; in passthrough mode it is the would-be rejection.
	WouldReject bool
	// Reason says why. A store failure admits (WouldReject false) unless
	// FailureModeDeny is set.
	Reason Reason
	// Limit is the client's share for the window: what it may be granted
	// in the window in all (0 when unknown, as for anonymous requests and
	// newcomers that are not counted yet). It is the share under the
	// current plan, or for a client far below its share spending units
	// leased under an earlier plan of the window, under that plan (Plan).
	Limit int64
	// Remaining is what the client may still send this window, as far as
	// this worker knows: exact for a single worker; for several, this
	// worker's lease plus the share nobody had leased at its last sync.
	// A refused request has 0: a response that refuses never says there
	// is room (even when a cheaper request would still fit, or the share
	// is there but the window's budget is not).
	Remaining int64
	// Reset is the time until the current window ends.
	Reset time.Duration
	// RetryAfter is how long a rejected request should wait before a
	// retry can succeed at the earliest, by reason, policy and mode
	// (docs/contract.md, "Responses").
	RetryAfter time.Duration
	// Turn: RetryAfter is the client's turn at the limit's pacer, placed
	// after the turns of the clients refused before it, a whole number of
	// seconds after the refusal once rounded up. A random delay added to
	// it would only make the client miss its unit.
	Turn bool
	// Plan is the id of the plan the request was counted in: the one that
	// announced Limit (its share period). Plan ids only grow and are never
	// reused.
	Plan uint64
	// Window is the aligned window index (see WindowAt) of the plan the
	// request was decided under.
	Window int64
}
