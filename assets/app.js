// filled in with the control room
