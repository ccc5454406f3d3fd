package admitgrpc

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rtserver/rtserver/message"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of a shed call.
const ErrorDomain = "rtserver.admission"

// shedError is the status of a shed call: ResourceExhausted when a per-key
// budget (RATE, COST) binds, Unavailable otherwise; RetryInfo carries the
// hint (whole milliseconds, as in the HTTP adapter's body) and
// ErrorInfo the binding reason and the class.
func shedError(class string, d message.Decision) error {
	code, word := codes.Unavailable, "OVERLOADED"
	if message.IsRateLimited(d.Reason) {
		code, word = codes.ResourceExhausted, "RATE_LIMITED"
	}
	ms := d.RetryAfterMillis()
	st := status.New(code, fmt.Sprintf("%s: class %q shed the call (reason %s); retry after %dms", word, class, d.Reason, ms))
	withDetails, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(ms) * time.Millisecond)},
		&errdetails.ErrorInfo{Reason: d.Reason, Domain: ErrorDomain, Metadata: map[string]string{"class": class}},
	)
	if err != nil { // only if the details cannot be marshalled, which these always can
		return st.Err()
	}
	return withDetails.Err()
}
