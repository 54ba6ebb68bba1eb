package main

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	ev, err := parse(map[string]any{"id": "ev-1", "account": "alice", "amount": "-42", "delay_ms": "5"})
	if err != nil || ev != (event{ID: "ev-1", Account: "alice", Amount: -42, Delay: 5 * time.Millisecond}) {
		t.Fatalf("parse = %+v, %v", ev, err)
	}
	for name, values := range map[string]map[string]any{
		"no id":            {"account": "a", "amount": "1"},
		"no account":       {"id": "e", "amount": "1"},
		"amount not int":   {"id": "e", "account": "a", "amount": "1.5"},
		"negative delay":   {"id": "e", "account": "a", "amount": "1", "delay_ms": "-1"},
		"delay not an int": {"id": "e", "account": "a", "amount": "1", "delay_ms": "soon"},
	} {
		if _, err := parse(values); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
