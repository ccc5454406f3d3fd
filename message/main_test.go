package message

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises rapid's default number of runs per property from 100 to
// 1000 (the combine laws are cheap, and the seed asks for >= 500), unless
// -rapid.checks was given on the command line.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if !given {
		if err := flag.Set("rapid.checks", "1000"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
