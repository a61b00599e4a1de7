package engine

// SetPlanInPlace sets the largest table l plans over in place (see
// provisional): 0 reads every plan but the first in slices, on ticks.
func SetPlanInPlace(l *Limiter, n int) { l.view.inPlaceMax = n }
