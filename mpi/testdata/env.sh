export EMPTY=''
export MULTI='line one
line two'
export NCCL_DEBUG='INFO'
export PATH='/usr/local/bin:/usr/bin'
export QUOTES='it'\''s "x"'
