
Z
+GPU-1a2b3c4d-0000-1111-2222-333344445555::0
+GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee::3
-
+GPU-1a2b3c4d-0000-1111-2222-333344445555::1