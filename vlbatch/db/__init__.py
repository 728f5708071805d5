"""Tables, sessions and CRUD functions. CRUD functions take keyword arguments and never raise HTTP errors."""
