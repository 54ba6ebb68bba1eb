package core

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/idem-go/idem/internal/canon"
)

func TestFingerprintParts(t *testing.T) {
	h := http.Header{"X-Account": {"a"}, "Content-Type": {"application/json"}}
	base := fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"}, h)
	other := http.Header{"X-Account": {"b"}}
	for name, fp := range map[string][32]byte{
		"method":          fingerprint("PUT", "/orders", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"}, h),
		"path":            fingerprint("POST", "/orders/7", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"}, h),
		"body":            fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":2}`), []string{"X-Account"}, h),
		"critical header": fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"}, other),
		"critical line": fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"},
			http.Header{"X-Account": {"a", "b"}, "Content-Type": {"application/json"}}),
		"query":      fingerprint("POST", "/orders", "amount=1000", "application/json", []byte(`{"a":1}`), []string{"X-Account"}, h),
		"media type": fingerprint("POST", "/orders", "", "text/plain", []byte(`{"a":1}`), []string{"X-Account"}, h),
		"content coding": fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"},
			http.Header{"X-Account": {"a"}, "Content-Encoding": {"gzip"}}),
		"last coding": fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"},
			http.Header{"X-Account": {"a"}, "Content-Encoding": {"gzip", "identity"}}),
		// Length prefixes: moving bytes between fields changes the hash.
		"boundaries": fingerprint("POST/", "orders", "", "application/json", []byte(`{"a":1}`), []string{"X-Account"}, h),
	} {
		if fp == base {
			t.Errorf("changing the %s did not change the fingerprint", name)
		}
	}
	gzip := fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), nil, http.Header{"Content-Encoding": {"gzip"}})
	if gzip == fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), nil, http.Header{"Content-Encoding": {"gzip", "identity"}}) {
		t.Error("a second Content-Encoding line, which Fiber reads, did not change the fingerprint")
	}
	// Fiber decodes the first Content-Encoding line only: "gzip, gzip" on one
	// line is decoded twice, on two lines once.
	if fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), nil, http.Header{"Content-Encoding": {"gzip, gzip"}}) ==
		fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), nil, http.Header{"Content-Encoding": {"gzip", "gzip"}}) {
		t.Error("one Content-Encoding line and the same list on two lines fingerprint the same")
	}
	if again := fingerprint("POST", "/orders", "", "application/json", []byte(` { "a" : 1 } `), []string{"X-Account"}, h); again != base {
		t.Error("an equivalent JSON body changed the fingerprint")
	}
	if fingerprint("POST", "/orders", "", "application/json", []byte(`{"a":1}`), nil, h) !=
		fingerprint("POST", "/orders", "", "Application/JSON; charset=utf-8", []byte(`{"a":1}`), nil, h) {
		t.Error("the Content-Type's case or parameters changed the fingerprint")
	}
	if fingerprint("DELETE", "/orders/7", "", "application/json", nil, nil, h) != fingerprint("DELETE", "/orders/7", "", "", nil, nil, h) {
		t.Error("the Content-Type of a request without a body changed the fingerprint")
	}
	if fingerprint("POST", "/orders", "a=1&b=2", "", nil, nil, h) != fingerprint("POST", "/orders", "b=2&a=1", "", nil, nil, h) {
		t.Error("the order of query parameters changed the fingerprint")
	}
}

// multipartBody encodes fields (name, value pairs; a name ending in ".txt"
// is sent as a file part) with a fresh random boundary, as a client does
// for every attempt.
func multipartBody(t *testing.T, fields ...string) (contentType string, body []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		var err error
		if strings.HasSuffix(fields[i], ".txt") {
			var fw io.Writer
			if fw, err = w.CreateFormFile("file", fields[i]); err == nil {
				_, err = io.WriteString(fw, fields[i+1])
			}
		} else {
			err = w.WriteField(fields[i], fields[i+1])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), b.Bytes()
}

// A multipart body's boundary and its fields' order do not change the
// fingerprint; its contents do.
func TestFingerprintMultipart(t *testing.T) {
	fp := func(fields ...string) [32]byte {
		ct, body := multipartBody(t, fields...)
		return fingerprint("POST", "/upload", "", ct, body, nil, http.Header{})
	}
	base := fp("amount", "100", "currency", "EUR", "invoice.txt", "paid")
	if fp("amount", "100", "currency", "EUR", "invoice.txt", "paid") != base {
		t.Error("the same form with another boundary changed the fingerprint")
	}
	if fp("invoice.txt", "paid", "currency", "EUR", "amount", "100") != base {
		t.Error("the order of the form's fields changed the fingerprint")
	}
	for name, other := range map[string][32]byte{
		"value":        fp("amount", "1000", "currency", "EUR", "invoice.txt", "paid"),
		"file content": fp("amount", "100", "currency", "EUR", "invoice.txt", "unpaid"),
		"file name":    fp("amount", "100", "currency", "EUR", "receipt.txt", "paid"),
		"field moved":  fp("amount", "100EUR", "currency", "", "invoice.txt", "paid"),
		"values order": fp("a", "1", "a", "2"),
	} {
		if other == base || (name == "values order" && other == fp("a", "2", "a", "1")) {
			t.Errorf("changing the %s did not change the fingerprint", name)
		}
	}
	// Bytes that are not the multipart body the Content-Type announces are
	// fingerprinted raw: two different ones never meet.
	ct, _ := multipartBody(t, "a", "1")
	if fingerprint("POST", "/upload", "", ct, []byte("garbage one"), nil, http.Header{}) ==
		fingerprint("POST", "/upload", "", ct, []byte("garbage two"), nil, http.Header{}) {
		t.Error("two bodies without parts have one fingerprint")
	}
}

// Raw bytes never meet another body's canonical form: the bytes of a form's
// canonical form, sent as the body, are a different request.
func TestRawBodyNeverMeetsCanonical(t *testing.T) {
	ct, body := multipartBody(t, "amount", "100")
	c, _ := canon.Body(nil, ct, canon.MediaType(ct), body)
	if bytes.Equal(c, body) {
		t.Fatal("the form was not canonicalised")
	}
	if fingerprint("POST", "/pay", "", ct, body, nil, http.Header{}) == fingerprint("POST", "/pay", "", ct, c, nil, http.Header{}) {
		t.Error("raw bytes equal to a form's canonical form have the form's fingerprint")
	}
}
