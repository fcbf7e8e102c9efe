package bootstrap

import "cecoll/internal/testutil"

var (
	watchdog    = testutil.Watchdog
	requireCode = testutil.RequireCode
	freePort    = testutil.FreePort
)
