"""The web console at ``/ui/`` on the broker's HTTP listener: `views` reads the broker's state into
plain values, `pages` renders them as HTML (pure functions), `browser` decodes the latest records of a
partition for the message browser, `routes` serves it all."""
