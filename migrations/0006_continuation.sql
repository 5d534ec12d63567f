-- Crash-transparent continuation (SPEC §19): the turn crash repair closed while the session's wake was
-- unspent, set by the repair in the lease-claiming transaction and cleared by the unit that opens the
-- continuation or decides against it (a cancel pending, AGENTD_CONTINUE_AFTER_CRASH=0, the crash-loop
-- limit). NULL: no continuation is owed. The log alone cannot tell a duty declined from one still owed
-- once a new delivery made the run state non-idle again; this column can.

ALTER TABLE sessions ADD COLUMN continue_turn integer;
