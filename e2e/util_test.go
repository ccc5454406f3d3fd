package e2e

import (
	"errors"

	"github.com/coder/websocket"
)

func asClose(err error, ce *websocket.CloseError) bool { return errors.As(err, ce) }
