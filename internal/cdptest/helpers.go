package cdptest

import (
	"context"
	"fmt"
	"testing"
)

// UntilJS waits in the page until pred() is truthy and resolves with its
// value; it rejects after ms with the predicate's text.
const UntilJS = `(pred, ms = 20000) => new Promise((resolve, reject) => {
	const t0 = performance.now();
	const poll = () => {
		let v;
		try { v = pred(); } catch (e) { reject(e); return; }
		if (v) { resolve(v); return; }
		if (performance.now() - t0 > ms) { reject(new Error("timed out waiting for " + pred)); return; }
		setTimeout(poll, 10);
	};
	poll();
})`

// Until is an expression that waits for the JavaScript condition cond.
func Until(cond string) string {
	return fmt.Sprintf("(%s)(() => (%s))", UntilJS, cond)
}

// OpenPage opens a tab on url for the rest of the test, failing it when
// the page does not load.
func OpenPage(t testing.TB, ctx context.Context, b *Browser, url string) *Page {
	t.Helper()
	p, err := b.NewPage(ctx, url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(p.Close)
	return p
}

// MustEval is Eval, failing the test on an error.
func (p *Page) MustEval(t testing.TB, ctx context.Context, expr string, out any) {
	t.Helper()
	if err := p.Eval(ctx, expr, out); err != nil {
		t.Fatalf("%v\nin: %.300s", err, expr)
	}
}
