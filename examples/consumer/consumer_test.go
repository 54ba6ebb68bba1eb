package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// A data, integrity or program-limit error is a refusal, wrapped or not; a
// connection error or another SQLSTATE is not.
func TestRefused(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		&pgconn.PgError{Code: "22003"}:                            true,
		fmt.Errorf("credit: %w", &pgconn.PgError{Code: "23505"}):  true,
		&pgconn.PgError{Code: "54000"}:                            true, // an index row over btree's limit
		&pgconn.PgError{Code: "40001"}:                            false,
		&pgconn.PgError{Code: "57P01"}:                            false,
		errors.New("dial tcp 127.0.0.1:5432: connection refused"): false,
	} {
		if got := refused(err); got != want {
			t.Errorf("refused(%v) = %v, want %v", err, got, want)
		}
	}
}
