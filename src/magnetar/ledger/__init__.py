"""The replicated ledger client: write sets (E/Qw/Qa striping), in-order acknowledgements, LAC,
ensemble changes, fencing and recovery, speculative reads, placement — over bookies.

Owns: everything a writer or reader of a ledger does across several bookies, and
``bookie_client`` (one pipelined connection to one bookie: request ids, futures, per-request
deadlines, digest checks on reads). Meets ``storage`` only through ``protocol.bookie`` messages;
never imports it. Invariant: an entry is acknowledged to the caller only once Qa bookies of its
write set stored it durably and every lower entry was acknowledged.
"""
