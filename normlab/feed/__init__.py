"""The live feed's shared half: `EventWriter` (store + Redis Stream, used by workers) and the stream
layout both sides agree on (`redis_feed`). The API's fan-out to browsers is backend.feed."""
