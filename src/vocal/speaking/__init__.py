"""Speaking a reply: text to sentences, the speech pipeline, and the speech worker process."""
