#!/bin/bash
cd /app
cat POLICY.md
sed -i 's/^PermitRootLogin yes$/PermitRootLogin no/' sshd_config
sed -i 's/^\( *\)PasswordAuthentication yes$/\1PasswordAuthentication no/' sshd_config
sed -i 's/^X11Forwarding yes$/X11Forwarding no/' sshd_config
sed -i 's/^PrintMotd no$/PrintMotd no\nClientAliveInterval 300\nClientAliveCountMax 2/' sshd_config
cat sshd_config
