package e2e

import "github.com/rtserver/rtserver/internal/cdptest"

// browser and page are the Chrome DevTools driver's (internal/cdptest);
// page carries this package's test helpers (mustEval).
type (
	browser = cdptest.Browser
	page    struct{ *cdptest.Page }
)
