//go:build !race

package wsock

// raceBuild: see race_on.go.
const raceBuild = false
