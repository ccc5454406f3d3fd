package handshake

import (
	"errors"
	"net/http"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/metrics"
)

// Refusal is why a token was refused: a reason label (bounded, one of
// metrics.AuthRefusalReasons) and a description fit for the client and
// the logs. Neither ever holds key material or the token's bytes: the
// description names the check that failed, not what it compared.
type Refusal struct {
	Reason      string
	Description string
}

// refusals maps each reason to its fixed description (RFC 6750 section 3
// error_description: printable ASCII without '"' or '\').
var refusals = map[string]string{
	metrics.AuthMissing:      "no token: send Authorization: Bearer <jwt> or ?token=<jwt>",
	metrics.AuthTooLarge:     "token larger than 8 KiB",
	metrics.AuthMalformed:    "token is not a well-formed JWT",
	metrics.AuthUnverifiable: "token's alg or kid matches no configured key",
	metrics.AuthSignature:    "token signature does not verify with the configured key",
	metrics.AuthExpired:      "token expired (exp is in the past)",
	metrics.AuthLifetime:     "token has no exp, or its exp is further ahead than auth.jwt.maxLifetime",
	metrics.AuthNotYetValid:  "token not valid yet (nbf or iat is in the future)",
	metrics.AuthAudience:     "token aud does not include auth.jwt.audience",
	metrics.AuthIssuer:       "token iss is not auth.jwt.issuer",
	metrics.AuthNoSubject:    "token has no sub claim",
	metrics.AuthBadSubject:   "token sub is over 1024 bytes or holds a control character",
	metrics.AuthTopicsClaim:  "token topics claim has the wrong shape",
	metrics.AuthCrit:         "token header lists crit extensions",
	metrics.AuthInvalid:      "token is invalid",
}

// RefusalOf classifies an error of the token check (Gate.VerifyToken's,
// or the handshake's) into its Refusal. The first check that failed
// decides: the signature is checked before the claims, so a forged,
// expired token is refused for its signature.
func RefusalOf(err error) Refusal {
	r := refusalReason(err)
	return Refusal{Reason: r, Description: refusals[r]}
}

func refusalReason(err error) string {
	switch {
	case errors.Is(err, errNoToken):
		return metrics.AuthMissing
	case errors.Is(err, errBigToken):
		return metrics.AuthTooLarge
	case errors.Is(err, errNoSubject):
		return metrics.AuthNoSubject
	case errors.Is(err, errBadSubject):
		return metrics.AuthBadSubject
	case errors.Is(err, errTopicsClaim):
		return metrics.AuthTopicsClaim
	case errors.Is(err, errCrit):
		return metrics.AuthCrit
	case errors.Is(err, errLifetime):
		return metrics.AuthLifetime
	case errors.Is(err, jwt.ErrTokenMalformed):
		return metrics.AuthMalformed
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return metrics.AuthSignature
	case errors.Is(err, jwt.ErrTokenUnverifiable), errors.Is(err, errAlg):
		return metrics.AuthUnverifiable
	case errors.Is(err, jwt.ErrTokenExpired):
		return metrics.AuthExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return metrics.AuthNotYetValid
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return metrics.AuthAudience
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return metrics.AuthIssuer
	}
	return metrics.AuthInvalid
}

// wwwAuthenticate is the RFC 6750 section 3 challenge for r: a request
// without a token gets the bare scheme (section 3.1: no error code when
// the request lacked authentication information), any other refusal
// invalid_token with the check that failed.
func wwwAuthenticate(r Refusal) string {
	if r.Reason == metrics.AuthMissing {
		return "Bearer"
	}
	return `Bearer error="invalid_token", error_description="` + r.Description + `"`
}

// refuseToken answers a refused token with 401 and the RFC 6750
// challenge, counts it by reason and logs the reason at debug level (one
// message per reason, so the rate limit of the node's logger keeps each
// reason visible). A topics claim of the wrong shape is a backend bug,
// not an attack: it is logged at warn.
func (g *Gate) refuseToken(w http.ResponseWriter, err error, ipKey string) {
	why := RefusalOf(err)
	g.rejected[rAuth].Inc()
	g.authRefused[why.Reason].Inc()
	if why.Reason == metrics.AuthTopicsClaim {
		g.log.Warn("token refused: its topics claim has the wrong shape", "err", err)
	} else {
		g.log.Debug("token refused: "+why.Reason, "why", why.Description, "ip", ipKey)
	}
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	h["Www-Authenticate"] = []string{wwwAuthenticate(why)}
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte("unauthorized: " + why.Description + "\n"))
}
