package connect

import (
	"errors"
	"fmt"
	"net/url"
)

// Error is a connection string that could not be used: it does not parse, asks for something this
// package does not do, or the server behind it cannot be reached. It holds the connection string with the
// password already masked (Redact), so neither Error() nor %#v nor a log of its fields can show a secret,
// and nothing upstream has to remember to redact.
type Error struct {
	// Kind is "PostgreSQL" or "Redis".
	Kind string
	// URL is the connection string, its password masked by Redact.
	URL string
	// Msg says what is wrong, such as "invalid PostgreSQL URL postgres://u:xxxxx@h/db", with the URL
	// redacted.
	Msg string
	// Err is the cause, if any; it never quotes the connection string, and no piece of a password in it
	// survives, however the driver split the string.
	Err error
}

func (e *Error) Error() string {
	s := "connect: " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// newError makes an Error for the connection string s, which it redacts; format has one %s, for it.
// Every error of this package that holds a cause is made here, and the cause, whichever driver or
// parser wrote it, has every piece of a password of s masked (maskError): this is the one door.
func newError(kind, s string, err error, format string) *Error {
	u := Redact(s)
	return &Error{Kind: kind, URL: u, Msg: fmt.Sprintf(format, u), Err: maskError(s, withoutURL(err))}
}

// withoutURL replaces an error of url.Parse, which quotes the URL or the part of it that it could not read
// (a password with an unescaped '/' shows as a bad port), with one that quotes nothing.
func withoutURL(err error) error {
	var (
		ue *url.Error
		ee url.EscapeError
		he url.InvalidHostError
	)
	switch {
	case err == nil || !errors.As(err, &ue):
		return err
	case errors.As(err, &ee):
		return errors.New("it has an invalid %-escape (a password's '%' must be written %25)")
	case errors.As(err, &he):
		return errors.New("its host has a character a host cannot have")
	default:
		return errors.New("it does not parse as a URL (characters such as @ / ? # : in a password must be percent-encoded)")
	}
}
