package core_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idem-go/idem/core"
)

// Do runs a function once per key and returns its stored result to every
// later call with that key.
func ExampleDo() {
	eng, err := core.New(core.Config{})
	if err != nil {
		panic(err)
	}
	type receipt struct {
		ID     string
		Amount int
	}
	refund := func(ctx context.Context) (receipt, error) {
		fmt.Println("refunding")
		return receipt{ID: "re_1", Amount: 500}, nil
	}
	for range 2 {
		r, replayed, err := core.Do(context.Background(), eng, "refunds", "order-42", refund)
		fmt.Println(r.ID, r.Amount, replayed, err)
	}
	// Output:
	// refunding
	// re_1 500 false <nil>
	// re_1 500 true <nil>
}

// A handler split into steps: run again after a failure, it skips the
// steps that finished and resumes at the first that did not.
func ExampleStep() {
	eng, err := core.New(core.Config{})
	if err != nil {
		panic(err)
	}
	failRecord := true
	pay := func(ctx context.Context) (string, error) {
		charge, err := core.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			fmt.Println("charging")
			return "ch_1", nil
		})
		if err != nil {
			return "", err
		}
		return core.Step(ctx, "record", func(ctx context.Context) (string, error) {
			fmt.Println("recording")
			if failRecord {
				return "", errors.New("database down")
			}
			return "payment of " + charge, nil
		})
	}
	_, _, err = core.Do(context.Background(), eng, "payments", "order-42", pay)
	fmt.Println(err)
	failRecord = false
	p, _, err := core.Do(context.Background(), eng, "payments", "order-42", pay)
	fmt.Println(p, err)
	// Output:
	// charging
	// recording
	// database down
	// recording
	// payment of ch_1 <nil>
}
