//go:build integration

package blackbox

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is where Debian's chromium package puts the browser;
// .ci/run installs it.
const chromiumPath = "/usr/bin/chromium"

// TestSwaggerUIShowsKeyInput opens the Gin example's Swagger UI in headless
// Chromium, as a user would: after "Try it out", POST /orders has an input
// for the Idempotency-Key header, GET /orders has none.
func TestSwaggerUIShowsKeyInput(t *testing.T) {
	s := start(t, build(t, "gin"))
	ctx := newBrowser(t, 60*time.Second)
	ctx, cancelTab := chromedp.NewContext(ctx)
	defer cancelTab()

	const (
		post = "#operations-orders-post_orders"
		get  = "#operations-orders-get_orders"
		// The input Swagger UI renders for a header parameter, once the
		// operation is expanded and "Try it out" clicked.
		keyInput = `tr[data-param-name="Idempotency-Key"][data-param-in="header"] input`
	)
	// Expand an operation and click "Try it out", as a user would; then
	// the Execute button and the parameters' inputs are shown.
	tryOut := func(op string) error {
		return chromedp.Do(ctx,
			chromedp.WaitVisible(chromedp.CSS(op+" .opblock-summary")),
			chromedp.Click(chromedp.CSS(op+" .opblock-summary")),
			chromedp.WaitVisible(chromedp.CSS(op+" .try-out__btn")),
			chromedp.Click(chromedp.CSS(op+" .try-out__btn")),
			chromedp.WaitVisible(chromedp.CSS(op+" .execute")),
		)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/swagger/index.html")); err != nil {
		t.Fatalf("open %s/swagger/index.html: %v", s.url, err)
	}
	if err := tryOut(post); err != nil {
		t.Fatalf("POST /orders, Try it out: %v", err)
	}
	postHasInput, err := chromedp.Run(ctx, chromedp.Evaluate[bool](present(post+" "+keyInput)))
	if err != nil {
		t.Fatal(err)
	}
	postHTML, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS(post)))
	if err := tryOut(get); err != nil {
		t.Fatalf("GET /orders, Try it out: %v", err)
	}
	getHasInput, err := chromedp.Run(ctx, chromedp.Evaluate[bool](present(get+" "+keyInput)))
	if err != nil {
		t.Fatal(err)
	}
	if !postHasInput {
		t.Errorf("POST /orders has no input for the Idempotency-Key header after Try it out:\n%s", postHTML)
	}
	if getHasInput {
		t.Error("GET /orders has an input for the Idempotency-Key header")
	}
}

// newBrowser starts headless Chromium with a fresh profile and returns its
// context, for chromedp.NewContext (a tab each). The browser is killed
// when the test ends or after timeout, whichever comes first: everything
// that uses it stops by itself.
func newBrowser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	browser, err := exec.LookPath("chromium")
	if err != nil {
		browser, err = exec.LookPath(chromiumPath)
	}
	if err != nil {
		t.Fatalf("chromium not found (%v): this test needs a headless browser; install Debian's chromium package (apt-get install chromium), as .ci/run does", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()), // fresh profile
	)
	ctx, cancelBrowser := chromedp.NewContext(ctx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancel() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", browser, err)
	}
	return ctx
}

// present is a JavaScript expression: whether an element matches the CSS
// selector sel.
func present(sel string) string {
	js, _ := json.Marshal(sel) // a JavaScript string literal
	return "document.querySelector(" + string(js) + ") !== null"
}
