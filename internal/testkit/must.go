package testkit

// Must returns v, or panics with err: for a test's constructor call that
// cannot fail with the arguments it is given,
// a := testkit.Must(message.New(cfg, deps)).
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
