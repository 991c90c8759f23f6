NAME = 'metrics'
