package idemkey_test

import (
	"fmt"
	"time"

	"github.com/idem-go/idem/idemkey"
)

// A structured key ties a key to a user, an operation and a resource.
func ExampleStructured() {
	k := idemkey.Structured{UserID: "u-42", Operation: "refund", ResourceID: "inv_7", ClientTime: time.UnixMilli(1795000000000)}
	fmt.Println(k)
	fmt.Println(idemkey.ValidateStructured(k.String()))
	fmt.Println(idemkey.UUIDv4("not-a-uuid") != nil)
	// Output:
	// u-42:refund:inv_7:1795000000000
	// <nil>
	// true
}
