package routedoc

import (
	"fmt"
	"slices"
	"testing"

	"github.com/idem-go/idem/core"
)

func TestOperations(t *testing.T) {
	t.Parallel()
	routes := []Route{
		{"POST", "/orders"}, {"GET", "/orders"}, {"PUT", "/orders/:id"}, {"ANY", "/hooks/:name"},
		{"POST", "/orders"}, // listed twice
	}
	for _, tc := range []struct {
		name      string
		methods   []string
		anyMethod string
		skipped   func(int, string) bool
		want      string
	}{
		{"defaults", nil, "", nil, "[{POST /orders} {PUT /orders/{id}}]"},
		{"an any route", nil, "ANY", nil,
			"[{DELETE /hooks/{name}} {PATCH /hooks/{name}} {POST /hooks/{name}} {PUT /hooks/{name}} {POST /orders} {PUT /orders/{id}}]"},
		{"POST only", []string{"POST"}, "ANY", nil, "[{POST /hooks/{name}} {POST /orders}]"},
		{"none", []string{}, "ANY", nil, "[]"},
		{"skipped by route and method", nil, "ANY", func(i int, m string) bool { return i == 3 && m != "POST" || i == 2 },
			"[{POST /hooks/{name}} {POST /orders}]"},
	} {
		var eng *core.Engine // nil: the default methods
		if tc.methods != nil {
			var err error
			if eng, err = core.New(core.Config{Methods: tc.methods}); err != nil {
				t.Fatal(err)
			}
		}
		got := Operations(routes, eng, tc.anyMethod, tc.skipped)
		if s := fmt.Sprint(got); s != tc.want || got == nil {
			t.Errorf("%s: %s, want %s", tc.name, s, tc.want)
		}
	}
}

func TestSafely(t *testing.T) {
	t.Parallel()
	var got []bool
	for _, f := range []func() bool{
		func() bool { return true },
		func() bool { return false },
		func() bool { panic("reads what the synthetic context lacks") },
	} {
		got = append(got, Safely(f))
	}
	if want := []bool{true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("Safely = %v, want %v", got, want)
	}
}

func ExampleOperations() {
	routes := []Route{{"POST", "/orders"}, {"GET", "/orders"}, {"DELETE", "/orders/:id"}}
	fmt.Println(Operations(routes, nil, "", nil))
	// Output:
	// [{POST /orders} {DELETE /orders/{id}}]
}
