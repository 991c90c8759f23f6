#!/bin/bash
cd /srv/site
find /srv/site -type d -exec chmod 755 {} +
find /srv/site -type f -exec chmod 644 {} +
chmod 755 /srv/site/cgi-bin/*
find /srv/site/private -type d -exec chmod 700 {} +
find /srv/site/private -type f -exec chmod 600 {} +
ls -lR /srv/site
cd /app
