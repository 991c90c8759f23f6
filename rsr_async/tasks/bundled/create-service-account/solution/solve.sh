#!/bin/bash
groupadd --system reportd
useradd --system --gid reportd --home-dir /var/lib/reportd --shell /usr/sbin/nologin reportd
mkdir -p /var/lib/reportd
chown reportd:reportd /var/lib/reportd
chmod 750 /var/lib/reportd
usermod -aG reportd alice
chgrp reportd /etc/reportd/reportd.conf
chmod 640 /etc/reportd/reportd.conf
id alice; id reportd
