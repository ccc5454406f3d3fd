// Package clock lets the tests of message's sub-packages run an
// Admission on a clock of their own: message.Deps keeps its clock
// unexported, so embedders never see a test hook, and registers here how
// to set it.
package clock

import "time"

// Set gives deps, a *message.Deps, the clock now. Package message sets
// it when it loads.
var Set func(deps any, now func() time.Time)
