//go:build integration

package blackbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// corsPage is a page of another origin than the API's, whose script posts
// one order three times with one key, cross-origin, the third time with
// another body, and resolves window.result to what it could read of each
// answer. A fetch that CORS refuses rejects the promise.
const corsPage = `<!doctype html>
<title>idem CORS</title>
<script>
window.result = (async () => {
  const q = new URLSearchParams(location.search);
  const api = q.get("api"), key = q.get("key");
  const out = [];
  for (const order of [{item: "book", qty: 1}, {item: "book", qty: 1}, {item: "pen", qty: 2}]) {
    const r = await fetch(api + "/orders", {
      method: "POST",
      headers: {"Content-Type": "application/json", "Idempotency-Key": key, "X-User-ID": "browser"},
      body: JSON.stringify(order),
    });
    out.push({status: r.status, replay: r.headers.get("X-Idempotency-Replay"),
      location: r.headers.get("Location"), contentType: r.headers.get("Content-Type"), body: await r.text()});
  }
  return out;
})();
</script>`

// corsAnswer is what the page read of one answer.
type corsAnswer struct {
	Status      int     `json:"status"`
	Replay      *string `json:"replay"` // nil: absent, or not exposed
	Location    *string `json:"location"`
	ContentType string  `json:"contentType"`
	Body        string  `json:"body"`
}

// TestExamplesCORS loads, in headless Chromium, a page served from
// http://127.0.0.1:<port> (an origin of its own), which posts to an example
// started with CORS_ORIGIN set to that origin: the first POST gets 201, the
// retry with the same key the replay, whose X-Idempotency-Replay (and
// Location) the page can read, and the same key with another body 422 with
// the problem's type. A page of another origin gets nothing: its fetch
// fails.
func TestExamplesCORS(t *testing.T) {
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, corsPage)
	}
	allowed := httptest.NewServer(http.HandlerFunc(page))
	t.Cleanup(allowed.Close)
	other := httptest.NewServer(http.HandlerFunc(page))
	t.Cleanup(other.Close)
	browser := newBrowser(t, 10*time.Minute)

	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			s := start(t, build(t, fw), "CORS_ORIGIN="+allowed.URL)
			ctx, cancel := chromedp.NewContext(browser)
			defer cancel()
			ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
			defer cancelTimeout()

			load := func(origin string) ([]corsAnswer, error) {
				url := origin + "/?api=" + s.url + "&key=" + newKey(t)
				if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
					t.Fatalf("open %s: %v", url, err)
				}
				return chromedp.Run(ctx, chromedp.Evaluate[[]corsAnswer]("window.result", chromedp.EvalAwaitPromise))
			}
			got, err := load(allowed.URL)
			if err != nil {
				t.Fatalf("page of %s (CORS_ORIGIN): %v", allowed.URL, err)
			}
			if len(got) != 3 {
				t.Fatalf("page read %d answers, want 3: %+v", len(got), got)
			}
			first, retry, changed := got[0], got[1], got[2]
			if first.Status != http.StatusCreated || first.Replay != nil || first.Location == nil {
				t.Errorf("first POST: %d, replay %s, Location %s; want 201, no replay header, a Location", first.Status, str(first.Replay), str(first.Location))
			}
			if retry.Status != http.StatusCreated || str(retry.Replay) != "true" || retry.Body != first.Body || str(retry.Location) != str(first.Location) {
				t.Errorf("retry: %d %s, replay %s, Location %s; want the replay of 201 %s (X-Idempotency-Replay readable: true)",
					retry.Status, retry.Body, str(retry.Replay), str(retry.Location), first.Body)
			}
			var problem struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(changed.Body), &problem); err != nil || changed.Status != http.StatusUnprocessableEntity ||
				!strings.HasPrefix(changed.ContentType, "application/problem+json") || !strings.HasSuffix(problem.Type, "#key-reused") {
				t.Errorf("same key, another body: %d %s %s; want 422, a problem of type ...#key-reused", changed.Status, changed.ContentType, changed.Body)
			}

			if got, err := load(other.URL); err == nil || !strings.Contains(err.Error(), "Failed to fetch") {
				t.Errorf("page of %s (not CORS_ORIGIN): %+v, %v; want the fetch refused (Failed to fetch)", other.URL, got, err)
			}
		})
	}
}

func str(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}
