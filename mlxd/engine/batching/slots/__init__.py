"""llama-server's slots: the table, slot actions, slot files and what wrote them, idle slots' caches."""
