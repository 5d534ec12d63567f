-- Reasoning tokens in a session's usage (API.md §4 `usage.reasoningTokens`): the part of output tokens the
-- model spent reasoning, summed like the other token kinds from every settled attempt that reports it.
-- Existing sessions start at 0: the pi-ai line that wrote their logs never reported reasoning tokens.

ALTER TABLE sessions ADD COLUMN reasoning_tokens bigint NOT NULL DEFAULT 0;
