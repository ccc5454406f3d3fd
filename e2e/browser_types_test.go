package e2e

import "github.com/rtserver/rtserver/internal/cdptest"

// The Chrome DevTools driver and its test helpers (internal/cdptest),
// under this package's short names.
type browser = cdptest.Browser

var (
	until    = cdptest.Until
	openPage = cdptest.OpenPage
)
