NAME = 'audit'
