// Package clock lets the tests of message's sub-packages run an
// Admission on a clock of their own: message.Options keeps its clock
// unexported, so embedders never see a test hook, and registers here how
// to set it.
package clock

import "time"

// Set gives opts, a *message.Options, the clock now. Package message sets
// it when it loads.
var Set func(opts any, now func() time.Time)
