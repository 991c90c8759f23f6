NAME = 'ratelimit'
