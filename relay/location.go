package relay

import (
	"errors"
	"fmt"

	"github.com/bunbox/bunbox/internal/tables"
	"github.com/bunbox/bunbox/model"
)

// mustNames returns the Names of schema and prefix, which the config's validate has checked.
func mustNames(loc model.Location) tables.Names {
	names, err := tables.New(loc.Schema, loc.TablePrefix)
	if err != nil {
		panic("relay: unchecked schema: " + err.Error())
	}
	return names
}

// validateTables returns the error of a schema or table prefix bunbox refuses, naming the field
// (Location.Schema or Location.TablePrefix), or nil.
func validateTables(loc model.Location) error {
	_, err := tables.New(loc.Schema, loc.TablePrefix)
	switch {
	case errors.Is(err, tables.ErrInvalidSchema):
		return fmt.Errorf("Location.Schema: %w", err)
	case err != nil:
		return fmt.Errorf("Location.TablePrefix: %w", err)
	}
	return nil
}
