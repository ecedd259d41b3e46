"""Which session a chat is in: the store (key -> session), reset policy, access rules, the inbox, and the
files that mirror the database."""
